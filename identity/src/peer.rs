//! Who a peer is (pure): the mesh identity in a certificate's one `spiffe://` URI SAN, and the pod
//! in its common name. Called on certificates rustls has already verified against the mesh's roots.

use crate::spiffe::{ParseError, SpiffeId};
use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

/// The identity a verified certificate names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The workload identity (URI SAN).
    pub id: SpiffeId,
    /// The pod (subject common name), when there is one.
    pub pod: Option<String>,
}

/// Why a certificate names no mesh identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// Not an X.509 certificate.
    #[error("the certificate does not parse: {0}")]
    Parse(String),
    /// No `spiffe://` URI SAN, or more than one.
    #[error("the certificate must name exactly one spiffe:// identity, it names {0}")]
    Count(usize),
    /// The URI is not a mesh identity.
    #[error(transparent)]
    Id(#[from] ParseError),
}

/// Reads the identity of `cert`.
pub fn identity(cert: &CertificateDer<'_>) -> Result<Peer, PeerError> {
    let (_, x509) =
        x509_parser::parse_x509_certificate(cert).map_err(|e| PeerError::Parse(e.to_string()))?;
    let san = x509
        .subject_alternative_name()
        .map_err(|e| PeerError::Parse(e.to_string()))?;
    let uris: Vec<&str> = san
        .iter()
        .flat_map(|s| s.value.general_names.iter())
        .filter_map(|n| match n {
            GeneralName::URI(u) if u.starts_with("spiffe://") => Some(*u),
            _ => None,
        })
        .collect();
    let [uri] = uris.as_slice() else {
        return Err(PeerError::Count(uris.len()));
    };
    let id = SpiffeId::parse(uri)?;
    let pod = x509
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    Ok(Peer { id, pod })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_without_a_spiffe_uri_has_no_identity() {
        let plain = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        assert_eq!(identity(plain.cert.der()), Err(PeerError::Count(0)));
        assert!(matches!(
            identity(&CertificateDer::from(vec![1, 2, 3])),
            Err(PeerError::Parse(_))
        ));
    }
}
