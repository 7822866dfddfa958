//! Workload identity of the Switchyard mesh, shared by the operator (which issues), `switchyard up`
//! (which issues with an ephemeral CA) and the sidecars (which are certified and talk mTLS):
//!
//! - `spiffe`: the identities, `spiffe://<trust domain>/ns/<namespace>/<kind>/<name>` (pure);
//! - `ca`: the CA and the certificates it signs (pure but for key generation);
//! - `authority`: the CA that signs now and the issuers listed during a rotation;
//! - `trust`: the anchors and issuers peers are checked against, swappable at run time;
//! - `peer`: the identity in a verified certificate (pure);
//! - `tls`: rustls configs, the swappable certificate store, the verifier that checks a server is
//!   the workload the client meant;
//! - `service`: the `Identity` gRPC service over an `Authenticator`;
//! - `incoming`, `connect`: TLS under tonic, server and client side; `limit`: a listener's
//!   connection caps;
//! - `local`: the identity service of a local run (an ephemeral CA, tokens made here);
//! - `pem`, `random`: PEM text; system randomness.

pub mod authority;
pub mod ca;
pub mod connect;
pub mod incoming;
pub mod issuing;
pub mod limit;
pub mod local;
pub mod peer;
pub mod pem;
pub mod random;
pub mod service;
pub mod spiffe;
pub mod tls;
pub mod trust;

pub use authority::Authority;
pub use ca::{Ca, Subject};
pub use peer::Peer;
pub use spiffe::{Kind, SpiffeId};
pub use tls::{CertStore, Expect};
pub use trust::{Trust, TrustStore};

/// Audience of the projected ServiceAccount token a sidecar proves itself with; a token for the
/// API server (or any other audience) is refused, and this one is useless anywhere else.
pub const TOKEN_AUDIENCE: &str = "switchyard-identity";
/// Where the operator mounts that token in every pod it makes.
pub const TOKEN_DIR: &str = "/var/run/secrets/switchyard";
/// The token's file name in [`TOKEN_DIR`].
pub const TOKEN_FILE: &str = "token";
/// File name of the mesh's trust bundle (PEM) in the sidecar's config folder.
pub const TRUST_FILE: &str = "ca.crt";
/// Default trust domain.
pub const DEFAULT_TRUST_DOMAIN: &str = "cluster.local";

/// How long to wait before renewing a certificate that ends at `not_after`, seen at `now`: two
/// thirds of what is left (at least a second, so a clock far off cannot make a busy loop).
pub fn renew_in(
    now: std::time::SystemTime,
    not_after: std::time::SystemTime,
) -> std::time::Duration {
    let left = not_after
        .duration_since(now)
        .unwrap_or(std::time::Duration::ZERO);
    left.mul_f64(2.0 / 3.0)
        .max(std::time::Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    #[test]
    fn renewal_comes_at_two_thirds_of_what_is_left() {
        let now = SystemTime::now();
        assert_eq!(
            super::renew_in(now, now + Duration::from_secs(24 * 3600)),
            Duration::from_secs(16 * 3600)
        );
        assert_eq!(super::renew_in(now, now), Duration::from_secs(1));
        assert_eq!(
            super::renew_in(now, now - Duration::from_secs(5)),
            Duration::from_secs(1)
        );
    }
}
