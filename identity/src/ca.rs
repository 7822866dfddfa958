//! The mesh's certificate authority: a root made here (kept by the operator in a Secret, or made
//! fresh for each `switchyard up`) or one the user gives (cert-manager's `tls.crt`, `tls.key` and
//! `ca.crt`), and the short-lived workload certificates it signs. Pure apart from key generation:
//! time comes in as an argument.

use crate::spiffe::SpiffeId;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _,
    SanType, SerialNumber,
};
use rustls_pki_types::{CertificateDer, CertificateSigningRequestDer};
use std::time::{Duration, SystemTime};

/// How long a root made here is valid.
pub const ROOT_LIFETIME: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// Certificates start this far in the past, so a peer whose clock is a little behind accepts them.
pub const BACKDATE: Duration = Duration::from_secs(60);
/// Longest pod name put in a certificate's common name (pod names are at most 253 characters;
/// the X.520 bound on a common name is 64).
pub const MAX_COMMON_NAME: usize = 64;
/// Largest certificate request accepted.
pub const MAX_CSR: usize = 4096;

/// Why a CA cannot be made or loaded; the message names the part.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// The certificate PEM holds no usable certificate.
    #[error("the CA certificate is not PEM: {0}")]
    Cert(String),
    /// The key PEM holds no usable key.
    #[error("the CA key is not a PEM private key rcgen can sign with: {0}")]
    Key(String),
    /// The certificate does not describe a CA.
    #[error("the CA certificate cannot issue: {0}")]
    NotCa(String),
    /// Making the root failed.
    #[error("cannot make a CA: {0}")]
    Generate(String),
}

/// Why a certificate was not issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The request does not parse or its signature does not verify.
    #[error("the certificate request is not a valid PKCS#10 request: {0}")]
    BadRequest(String),
    /// The request's key is of a kind the mesh's TLS does not use.
    #[error("the certificate request's key must be ECDSA P-256 or P-384 or Ed25519")]
    KeyType,
    /// Signing failed.
    #[error("cannot sign the certificate: {0}")]
    Sign(String),
}

/// The pod a certificate is for: its identity (the URI SAN) and its name (the common name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// The workload identity.
    pub id: SpiffeId,
    /// The pod's name.
    pub pod: String,
}

/// An issued certificate.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The leaf first, then the issuing certificate when it is not itself a root.
    pub chain: Vec<CertificateDer<'static>>,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
}

/// A CA's certificate and key as PEM, to store.
#[derive(Clone, Debug)]
pub struct CaPem {
    /// The root certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

/// A CA that signs workload certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert: CertificateDer<'static>,
    /// Whether `cert` is a root (then it is not sent in chains).
    self_signed: bool,
    trust: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("trust", &self.trust.len())
            .finish()
    }
}

fn random_serial() -> Result<SerialNumber, String> {
    let mut bytes: [u8; 16] =
        crate::random::bytes().ok_or("the system has no randomness for a serial number")?;
    // Positive and 16 bytes long, as RFC 5280 wants.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&bytes))
}

impl Ca {
    /// Makes a new root for `trust_domain`, valid from `now` for [`ROOT_LIFETIME`].
    pub fn generate(trust_domain: &str, now: SystemTime) -> Result<(Ca, CaPem), CaError> {
        let key = KeyPair::generate().map_err(|e| CaError::Generate(e.to_string()))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "switchyard");
        dn.push(
            DnType::CommonName,
            format!("switchyard mesh CA {trust_domain}"),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = (now - BACKDATE).into();
        params.not_after = (now + ROOT_LIFETIME).into();
        params.serial_number = Some(random_serial().map_err(CaError::Generate)?);
        let cert = params
            .self_signed(&key)
            .map_err(|e| CaError::Generate(e.to_string()))?;
        let pem = CaPem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        let der = cert.der().clone();
        Ok((
            Ca {
                issuer: Issuer::new(params, key),
                cert: der.clone(),
                self_signed: true,
                trust: vec![der],
            },
            pem,
        ))
    }

    /// Loads a CA: the issuing certificate and key, and the roots to trust (`trust_pem`, e.g.
    /// cert-manager's `ca.crt`; when absent the issuing certificate is the root).
    pub fn from_pem(cert_pem: &str, key_pem: &str, trust_pem: Option<&str>) -> Result<Ca, CaError> {
        let chain = crate::pem::parse_certs(cert_pem.as_bytes()).map_err(CaError::Cert)?;
        let cert = chain[0].clone();
        let key = KeyPair::from_pem(key_pem).map_err(|e| CaError::Key(e.to_string()))?;
        let (_, parsed) =
            x509_parser::parse_x509_certificate(&cert).map_err(|e| CaError::Cert(e.to_string()))?;
        if !parsed.is_ca() {
            return Err(CaError::NotCa(
                "its basic constraints do not say CA:TRUE".into(),
            ));
        }
        let spki = parsed.public_key().raw;
        let key_spki = key.subject_public_key_info();
        if spki != key_spki.as_slice() {
            return Err(CaError::Key(
                "the key does not belong to the certificate".into(),
            ));
        }
        let self_signed = parsed.subject() == parsed.issuer();
        let trust = match trust_pem.filter(|t| !t.trim().is_empty()) {
            Some(t) => crate::pem::parse_certs(t.as_bytes()).map_err(CaError::Cert)?,
            None if self_signed => vec![cert.clone()],
            None => {
                return Err(CaError::NotCa(
                    "it is an intermediate and no root (ca.crt) was given to trust".into(),
                ));
            }
        };
        let issuer =
            Issuer::from_ca_cert_der(&cert, key).map_err(|e| CaError::Cert(e.to_string()))?;
        Ok(Ca {
            issuer,
            cert,
            self_signed,
            trust,
        })
    }

    /// The roots the mesh trusts.
    pub fn trust(&self) -> &[CertificateDer<'static>] {
        &self.trust
    }

    /// The certificate this CA signs with (the issuer, which is also the root when self-signed).
    pub fn issuer_cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// Signs a certificate for `subject` over the key of `csr` (DER), valid from `now` (minus
    /// [`BACKDATE`]) for `lifetime`. The request's own names are ignored: the certificate names what
    /// the caller proved, nothing it asked for.
    pub fn issue(
        &self,
        csr: &[u8],
        subject: &Subject,
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<Issued, IssueError> {
        if csr.len() > MAX_CSR {
            return Err(IssueError::BadRequest(format!(
                "larger than {MAX_CSR} bytes"
            )));
        }
        let request =
            CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(csr))
                .map_err(|e| IssueError::BadRequest(e.to_string()))?;
        let alg = request.public_key.algorithm();
        if ![
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_ED25519,
        ]
        .contains(&alg)
        {
            return Err(IssueError::KeyType);
        }
        self.sign(&request.public_key, subject, &[], lifetime, now)
    }

    /// Makes a key and signs a certificate for it: the operator's own serving certificate.
    pub fn issue_with_new_key(
        &self,
        subject: &Subject,
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<(Issued, KeyPair), IssueError> {
        self.issue_with_new_key_and_names(subject, &[], lifetime, now)
    }

    /// As [`Ca::issue_with_new_key`], naming also the DNS names `dns`: a server that peers dial by
    /// host name and check it (the JetStream servers' cluster routes).
    pub fn issue_with_new_key_and_names(
        &self,
        subject: &Subject,
        dns: &[String],
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<(Issued, KeyPair), IssueError> {
        let key = KeyPair::generate().map_err(|e| IssueError::Sign(e.to_string()))?;
        let issued = self.sign(&key, subject, dns, lifetime, now)?;
        Ok((issued, key))
    }

    fn sign(
        &self,
        key: &impl rcgen::PublicKeyData,
        subject: &Subject,
        dns: &[String],
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<Issued, IssueError> {
        let uri = subject.id.uri();
        let mut params = CertificateParams::default();
        let sign_error = |e: rcgen::Error| IssueError::Sign(e.to_string());
        params.subject_alt_names = vec![SanType::URI(uri.try_into().map_err(sign_error)?)];
        for name in dns {
            let name = name.as_str().try_into().map_err(sign_error)?;
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        let mut dn = DistinguishedName::new();
        let cn: String = subject.pod.chars().take(MAX_COMMON_NAME).collect();
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let not_before = now - BACKDATE;
        let not_after = now + lifetime;
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        params.serial_number = Some(random_serial().map_err(IssueError::Sign)?);
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(key, &self.issuer)
            .map_err(|e| IssueError::Sign(e.to_string()))?;
        let mut chain = vec![cert.der().clone()];
        if !self.self_signed {
            chain.push(self.cert.clone());
        }
        Ok(Issued {
            chain,
            not_before,
            not_after,
        })
    }
}

/// A fresh key and a certificate request for it (DER): what a sidecar sends to be certified. The
/// private key never leaves the process.
pub fn key_and_request() -> Result<(KeyPair, Vec<u8>), IssueError> {
    let key = KeyPair::generate().map_err(|e| IssueError::Sign(e.to_string()))?;
    let csr = CertificateParams::default()
        .serialize_request(&key)
        .map_err(|e| IssueError::Sign(e.to_string()))?;
    Ok((key, csr.der().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer;
    use crate::spiffe::Kind;

    fn subject() -> Subject {
        Subject {
            id: SpiffeId::new("cluster.local", "shop", Kind::Manager, "handlers").expect("id"),
            pod: "handlers-manager-7d9f-abcde".into(),
        }
    }

    #[test]
    fn issues_a_leaf_naming_only_what_was_proved() {
        let now = SystemTime::now();
        let (ca, pem) = Ca::generate("cluster.local", now).expect("ca");
        let (_key, csr) = key_and_request().expect("csr");
        let issued = ca
            .issue(&csr, &subject(), Duration::from_secs(3600), now)
            .expect("issued");
        assert_eq!(issued.chain.len(), 1, "a root is not sent in the chain");
        let who = peer::identity(&issued.chain[0]).expect("identity");
        assert_eq!(who.id, subject().id);
        assert_eq!(who.pod.as_deref(), Some("handlers-manager-7d9f-abcde"));
        assert_eq!(
            issued
                .not_after
                .duration_since(issued.not_before)
                .expect("order"),
            Duration::from_secs(3600) + BACKDATE
        );
        // The stored PEM loads back into the same CA.
        let again = Ca::from_pem(&pem.cert, &pem.key, None).expect("reload");
        assert_eq!(again.trust(), ca.trust());
    }

    #[test]
    fn refuses_garbage_requests_and_mismatched_keys() {
        let now = SystemTime::now();
        let (ca, pem) = Ca::generate("cluster.local", now).expect("ca");
        let e = ca
            .issue(b"not a csr", &subject(), Duration::from_secs(60), now)
            .expect_err("garbage");
        assert!(e.to_string().contains("PKCS#10"), "{e}");
        let e = ca
            .issue(
                &vec![0u8; MAX_CSR + 1],
                &subject(),
                Duration::from_secs(60),
                now,
            )
            .expect_err("too big");
        assert!(e.to_string().contains("larger"), "{e}");
        let (_, other) = Ca::generate("cluster.local", now).expect("other");
        let e = Ca::from_pem(&pem.cert, &other.key, None).expect_err("wrong key");
        assert!(e.to_string().contains("does not belong"), "{e}");
        let e = Ca::from_pem("junk", &pem.key, None).expect_err("junk");
        assert!(e.to_string().contains("PEM"), "{e}");
    }

    #[test]
    fn an_intermediate_needs_a_root_to_trust_and_is_sent_in_chains() {
        let now = SystemTime::now();
        let (root, _) = Ca::generate("cluster.local", now).expect("root");
        // An intermediate CA signed by the root, as cert-manager would keep it.
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.signed_by(&key, &root.issuer).expect("intermediate");
        let e = Ca::from_pem(&cert.pem(), &key.serialize_pem(), None).expect_err("no root");
        assert!(e.to_string().contains("ca.crt"), "{e}");
        let trust = crate::pem::certs(root.trust());
        let ca = Ca::from_pem(&cert.pem(), &key.serialize_pem(), Some(&trust)).expect("ca");
        let (_k, csr) = key_and_request().expect("csr");
        let issued = ca
            .issue(&csr, &subject(), Duration::from_secs(60), now)
            .expect("issued");
        assert_eq!(issued.chain.len(), 2);
        assert_eq!(ca.trust(), root.trust());
    }
}
