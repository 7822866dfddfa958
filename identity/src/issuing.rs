//! The process that holds the [`Authority`] (the operator, the identity service of `switchyard
//! up`): its own certificate and the trust its TLS checks peers against follow every rotation, so
//! it serves certificates from the issuer that signs now and accepts peers of every listed issuer,
//! with no restart.

use crate::CertStore;
use crate::authority::{Authority, Change};
use crate::ca::{Ca, IssueError, Subject};
use crate::tls::TlsError;
use crate::trust::{TrustError, TrustStore};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Why a rotation step could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    /// The new trust is unusable (the previous one stays).
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// The holder's own certificate could not be signed.
    #[error("its own certificate: {0}")]
    Issue(#[from] IssueError),
    /// The holder's own certificate could not be installed.
    #[error("its own certificate: {0}")]
    Install(#[from] TlsError),
}

/// The authority, the holder's certificate and the trust of its TLS.
pub struct Issuing {
    /// The CA that signs and the trust that goes with it.
    pub authority: Arc<Authority>,
    /// The holder's own certificate (served by its TLS).
    pub store: Arc<CertStore>,
    /// What its TLS checks peers against.
    pub trust: Arc<TrustStore>,
    subject: Subject,
    lifetime: Duration,
}

impl Issuing {
    /// Holds `authority`, certified as `subject` for `lifetime` (certified now).
    pub fn new(
        authority: Arc<Authority>,
        subject: Subject,
        lifetime: Duration,
    ) -> Result<Issuing, RotateError> {
        let me = Issuing {
            trust: Arc::new(TrustStore::new(authority.trust())?),
            authority,
            store: Arc::new(CertStore::default()),
            subject,
            lifetime,
        };
        me.certify_self()?;
        Ok(me)
    }

    /// Who the holder is.
    pub fn subject(&self) -> &Subject {
        &self.subject
    }

    /// Signs and installs a new certificate for the holder; returns its end of validity.
    pub fn certify_self(&self) -> Result<SystemTime, RotateError> {
        let (issued, key) = self.authority.ca().issue_with_new_key(
            &self.subject,
            self.lifetime,
            SystemTime::now(),
        )?;
        let not_after = issued.not_after;
        self.store.install(
            issued.chain,
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            not_after,
        )?;
        Ok(not_after)
    }

    /// Takes the CA as its Secret holds it now: the trust follows, and the holder's certificate is
    /// re-signed when another issuer signs.
    pub fn offer(&self, ca: impl Into<Arc<Ca>>, now: SystemTime) -> Result<Change, RotateError> {
        let change = self.authority.offer(ca, now);
        self.follow(change == Change::Switched)?;
        Ok(change)
    }

    /// Lets a pending issuer sign when due (see [`Authority::tick`]); returns whether it did.
    pub fn tick(&self, now: SystemTime) -> Result<bool, RotateError> {
        let switched = self.authority.tick(now);
        if switched {
            self.follow(true)?;
        }
        Ok(switched)
    }

    fn follow(&self, switched: bool) -> Result<(), RotateError> {
        // Trust first: a certificate from the new issuer is only shown once its peers' side of
        // this process accepts the same issuers.
        self.trust.set(self.authority.trust())?;
        if switched {
            self.certify_self()?;
        }
        Ok(())
    }
}
