//! PEM text of certificates (pure), for the trust bundle the operator publishes and the files
//! `switchyard up` writes.

use base64::Engine as _;
use rustls_pki_types::CertificateDer;

/// `-----BEGIN CERTIFICATE-----` blocks of `certs`, in order.
pub fn certs(certs: &[CertificateDer<'_>]) -> String {
    let mut out = String::new();
    for c in certs {
        let b64 = base64::engine::general_purpose::STANDARD.encode(c.as_ref());
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            // Base64 output is ASCII.
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// Parses PEM certificates; the error says what is wrong.
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls_pki_types::pem::PemObject as _;
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block".into());
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips() {
        let ders = vec![
            rustls_pki_types::CertificateDer::from(vec![1u8; 100]),
            rustls_pki_types::CertificateDer::from(vec![2u8; 3]),
        ];
        let text = super::certs(&ders);
        assert_eq!(text.matches("BEGIN CERTIFICATE").count(), 2);
        assert_eq!(super::parse_certs(text.as_bytes()).expect("parses"), ders);
        assert!(super::parse_certs(b"nothing").is_err());
    }
}
