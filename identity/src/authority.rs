//! The issuing side of a rotation (pure apart from the swap; time comes in as an argument): the
//! CA that signs now, the trust anchors, and the issuers a peer's certificate may be signed by.
//!
//! A new issuer (cert-manager re-issued it, a user replaced the Secret) is announced before it signs:
//! for `activation_delay` it is listed among the issuers while the previous one keeps signing, so
//! every sidecar (which polls the trust every few seconds) accepts certificates from it before any
//! exists. Then it signs, and the previous issuer stays listed until it expires, so the
//! certificates it signed keep working until their holders renew (early, as they see the new
//! signer). A previous issuer whose root left the anchors, or that expired, cannot keep signing: the
//! new one then signs at once.

use crate::ca::Ca;
use crate::trust::{Trust, not_after};
use arc_swap::ArcSwap;
use rustls_pki_types::CertificateDer;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Most issuers listed at once (the signing one, a pending one, previous ones until they expire).
pub const MAX_ISSUERS: usize = 4;

/// What an offered CA changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    Same,
    /// The anchors changed; the issuer is the same.
    Anchors,
    /// A new issuer is announced and signs after the activation delay.
    Staged,
    /// A new issuer signs from now on.
    Switched,
}

#[derive(Clone)]
struct State {
    signing: Arc<Ca>,
    /// A new issuer and when it was first seen.
    pending: Option<(Arc<Ca>, SystemTime)>,
    /// Issuers that signed before, kept listed until they expire.
    previous: Vec<CertificateDer<'static>>,
}

/// The CA that signs and the trust that goes with it, swapped as a whole.
pub struct Authority {
    state: ArcSwap<State>,
    activation_delay: Duration,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("activation_delay", &self.activation_delay)
            .finish()
    }
}

/// Whether `issuer` can still sign under `anchors` at `now`: not expired, and its root (itself when
/// self-signed, or the anchor whose key signed it) still among them.
fn still_anchored(ca: &Ca, anchors: &[CertificateDer<'static>], now: SystemTime) -> bool {
    let cert = ca.issuer_cert();
    if not_after(cert).is_none_or(|t| t <= now) {
        return false;
    }
    if anchors.contains(cert) {
        return true;
    }
    let Ok((_, x509)) = x509_parser::parse_x509_certificate(cert) else {
        return false;
    };
    anchors.iter().any(|a| {
        x509_parser::parse_x509_certificate(a)
            .is_ok_and(|(_, root)| x509.verify_signature(Some(root.public_key())).is_ok())
    })
}

impl Authority {
    /// Signs with `ca`; new issuers are announced for `activation_delay` before they sign.
    pub fn new(ca: impl Into<Arc<Ca>>, activation_delay: Duration) -> Authority {
        Authority {
            state: ArcSwap::from_pointee(State {
                signing: ca.into(),
                pending: None,
                previous: Vec::new(),
            }),
            activation_delay,
        }
    }

    /// The CA that signs now.
    pub fn ca(&self) -> Arc<Ca> {
        self.state.load().signing.clone()
    }

    /// The certificate that signs now.
    pub fn signer(&self) -> CertificateDer<'static> {
        self.state.load().signing.issuer_cert().clone()
    }

    /// The anchors (the newest CA's) and the issuers listed now: pending, signing, previous.
    pub fn trust(&self) -> Trust {
        let s = self.state.load();
        let newest = s.pending.as_ref().map_or(&s.signing, |(ca, _)| ca);
        let mut issuers = Vec::new();
        let candidates = s
            .pending
            .iter()
            .map(|(ca, _)| ca.issuer_cert())
            .chain([s.signing.issuer_cert()])
            .chain(s.previous.iter());
        for c in candidates {
            if !issuers.contains(c) && issuers.len() < MAX_ISSUERS {
                issuers.push(c.clone());
            }
        }
        Trust {
            anchors: newest.trust().to_vec(),
            issuers: Some(issuers),
        }
    }

    /// Takes `ca` (the CA Secret as it is now) at `now`.
    pub fn offer(&self, ca: impl Into<Arc<Ca>>, now: SystemTime) -> Change {
        let s = self.state.load_full();
        let ca: Arc<Ca> = ca.into();
        let mut next = (*s).clone();
        let change = if ca.issuer_cert() == s.signing.issuer_cert() {
            // The same issuer (perhaps with other anchors): any pending one was withdrawn.
            let same = ca.trust() == s.signing.trust() && s.pending.is_none();
            next.signing = ca;
            next.pending = None;
            if same { Change::Same } else { Change::Anchors }
        } else if s
            .pending
            .as_ref()
            .is_some_and(|(p, _)| p.issuer_cert() == ca.issuer_cert())
        {
            let same = s
                .pending
                .as_ref()
                .is_some_and(|(p, _)| p.trust() == ca.trust());
            let since = s.pending.as_ref().map_or(now, |(_, t)| *t);
            next.pending = Some((ca, since));
            if same { Change::Same } else { Change::Anchors }
        } else if self.activation_delay > Duration::ZERO
            && still_anchored(&s.signing, ca.trust(), now)
        {
            next.pending = Some((ca, now));
            Change::Staged
        } else {
            Self::retire(&mut next, ca, now);
            Change::Switched
        };
        if change != Change::Same {
            self.state.store(Arc::new(next));
        }
        change
    }

    /// Lets a pending issuer sign once its delay is over (or once the signing one cannot go on);
    /// returns whether it switched.
    pub fn tick(&self, now: SystemTime) -> bool {
        let s = self.state.load_full();
        let Some((pending, since)) = &s.pending else {
            return false;
        };
        let due = now >= *since + self.activation_delay;
        if !due && still_anchored(&s.signing, pending.trust(), now) {
            return false;
        }
        let mut next = (*s).clone();
        Self::retire(&mut next, pending.clone(), now);
        self.state.store(Arc::new(next));
        true
    }

    fn retire(next: &mut State, ca: Arc<Ca>, now: SystemTime) {
        let old = std::mem::replace(&mut next.signing, ca);
        next.pending = None;
        next.previous.insert(0, old.issuer_cert().clone());
        let current = next.signing.issuer_cert().clone();
        next.previous
            .retain(|c| *c != current && not_after(c).is_some_and(|t| t > now));
        next.previous.truncate(MAX_ISSUERS - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::{Ca, CaPem};
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};

    /// An intermediate under `root` (PEM), as cert-manager keeps an issuer: tls.crt, tls.key.
    fn intermediate(root: &CaPem) -> (String, String) {
        let root_key = KeyPair::from_pem(&root.key).expect("root key");
        let root_issuer =
            rcgen::Issuer::from_ca_cert_pem(&root.cert, root_key).expect("root issuer");
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "issuer");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.signed_by(&key, &root_issuer).expect("intermediate");
        (cert.pem(), key.serialize_pem())
    }

    fn load((cert, key): &(String, String), anchors: &[&CaPem]) -> Ca {
        let bundle: String = anchors.iter().map(|a| a.cert.as_str()).collect();
        Ca::from_pem(cert, key, Some(&bundle)).expect("issuer")
    }

    #[test]
    fn a_staged_rotation_announces_the_new_issuer_before_it_signs() {
        let now = SystemTime::now();
        let (_, r1) = Ca::generate("td", now).expect("r1");
        let (_, r2) = Ca::generate("td", now).expect("r2");
        let delay = Duration::from_secs(30);
        let i1 = intermediate(&r1);
        let auth = Authority::new(load(&i1, &[&r1]), delay);
        let first = auth.signer();
        assert_eq!(auth.trust().issuers, Some(vec![first.clone()]));
        assert_eq!(auth.offer(load(&i1, &[&r1]), now), Change::Same);

        // 1. The new root joins the bundle; the issuer stays.
        assert_eq!(auth.offer(load(&i1, &[&r1, &r2]), now), Change::Anchors);
        assert_eq!(auth.trust().anchors.len(), 2);
        assert_eq!(auth.signer(), first);

        // 2. The issuer is re-issued under the new root: listed at once, signing after the delay.
        let i2 = intermediate(&r2);
        assert_eq!(auth.offer(load(&i2, &[&r1, &r2]), now), Change::Staged);
        let second = load(&i2, &[&r1, &r2]).issuer_cert().clone();
        assert_eq!(
            auth.signer(),
            first,
            "the old issuer signs during the delay"
        );
        assert_eq!(
            auth.trust().issuers,
            Some(vec![second.clone(), first.clone()])
        );
        // Seen again (another watch event) it keeps its first sighting.
        assert_eq!(
            auth.offer(load(&i2, &[&r1, &r2]), now + Duration::from_secs(20)),
            Change::Same
        );
        assert!(!auth.tick(now + Duration::from_secs(29)));
        assert!(auth.tick(now + delay));
        assert_eq!(auth.signer(), second);
        assert_eq!(
            auth.trust().issuers,
            Some(vec![second.clone(), first.clone()]),
            "the previous issuer stays listed for the certificates it signed"
        );

        // 3. The old root leaves the bundle.
        assert_eq!(auth.offer(load(&i2, &[&r2]), now + delay), Change::Anchors);
        let trust = auth.trust();
        assert_eq!(trust.anchors, load(&i2, &[&r2]).trust().to_vec());
        assert!(!auth.tick(now + delay * 2));
    }

    #[test]
    fn a_new_issuer_signs_at_once_when_the_old_one_lost_its_root() {
        let now = SystemTime::now();
        let (_, r1) = Ca::generate("td", now).expect("r1");
        let (_, r2) = Ca::generate("td", now).expect("r2");
        let auth = Authority::new(load(&intermediate(&r1), &[&r1]), Duration::from_secs(30));
        let i2 = intermediate(&r2);
        assert_eq!(auth.offer(load(&i2, &[&r2]), now), Change::Switched);
        assert_eq!(&auth.signer(), load(&i2, &[&r2]).issuer_cert());
        // A single self-signed CA is both anchor and issuer, as before.
        let (ca, _) = Ca::generate("td", now).expect("ca");
        let single = Authority::new(ca, Duration::ZERO);
        let trust = single.trust();
        assert_eq!(Some(trust.anchors.clone()), trust.issuers);
    }
}
