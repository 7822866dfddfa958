//! The certificates this replica issued that are still in use (pure but for the lock): the latest
//! per pod, until it expires or the pod is gone. They tell when a rotation is done: once no pod's
//! latest certificate is from a previous issuer, the old root can leave the bundle. A pod deleted
//! before it renewed (a rollout, a scale-down) would otherwise count for the rest of its
//! certificate's life, a day by default: `gone_pods` looks those up and forgets them.

use rustls_pki_types::CertificateDer;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;
use switchyard_identity::Subject;

/// Most pods tracked; past it, expired entries are dropped first and then new pods are not
/// tracked (the metric undercounts, it never grows without bound).
pub(crate) const MAX_LEAVES: usize = 100_000;

/// A summary of the leaves in use at one time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leaves {
    /// End of validity of the oldest one, if any.
    pub oldest_expiry: Option<SystemTime>,
    /// Signed by the issuer that signs now.
    pub current: usize,
    /// Signed by another.
    pub previous: usize,
}

/// A pod: its namespace and name.
pub(crate) type PodKey = (String, String);

/// The latest certificate of each pod: its end of validity and its issuer.
#[derive(Default)]
pub(crate) struct LeafBook {
    latest: Mutex<HashMap<PodKey, (SystemTime, CertificateDer<'static>)>>,
}

impl LeafBook {
    /// Records a certificate for `subject`, signed by `signer`, valid until `not_after`.
    pub(crate) fn issued(
        &self,
        subject: &Subject,
        not_after: SystemTime,
        signer: &CertificateDer<'_>,
    ) {
        let Ok(mut map) = self.latest.lock() else {
            return;
        };
        let key = (subject.id.namespace.clone(), subject.pod.clone());
        if map.len() >= MAX_LEAVES && !map.contains_key(&key) {
            let now = SystemTime::now();
            map.retain(|_, (t, _)| *t > now);
            if map.len() >= MAX_LEAVES {
                return;
            }
        }
        map.insert(key, (not_after, signer.clone().into_owned()));
    }

    /// The leaves valid at `now` (expired ones are dropped), counted against `signer`.
    pub(crate) fn summary(&self, signer: &CertificateDer<'_>, now: SystemTime) -> Leaves {
        let Ok(mut map) = self.latest.lock() else {
            return Leaves::default();
        };
        map.retain(|_, (t, _)| *t > now);
        let mut out = Leaves::default();
        for (t, by) in map.values() {
            if by.as_ref() == signer.as_ref() {
                out.current += 1;
            } else {
                out.previous += 1;
            }
            out.oldest_expiry = Some(out.oldest_expiry.map_or(*t, |o| o.min(*t)));
        }
        out
    }

    /// At most `max` of the pods whose latest certificate another issuer than `signer` signed:
    /// those a rotation waits on.
    pub(crate) fn previous_pods(&self, signer: &CertificateDer<'_>, max: usize) -> Vec<PodKey> {
        let Ok(map) = self.latest.lock() else {
            return Vec::new();
        };
        map.iter()
            .filter(|(_, (_, by))| by.as_ref() != signer.as_ref())
            .map(|(k, _)| k.clone())
            .take(max)
            .collect()
    }

    /// Forgets the certificate of `pod`: the pod is gone, nothing uses it any more.
    pub(crate) fn forget(&self, pod: &PodKey) {
        if let Ok(mut map) = self.latest.lock() {
            map.remove(pod);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use switchyard_identity::{Kind, SpiffeId};

    fn pod(name: &str) -> Subject {
        Subject {
            id: SpiffeId::new("td", "shop", Kind::Manager, "handlers").expect("id"),
            pod: name.into(),
        }
    }

    #[test]
    fn a_pod_counts_once_under_its_latest_issuer_until_it_expires() {
        let now = SystemTime::now();
        let (old, new) = (CertificateDer::from(vec![1]), CertificateDer::from(vec![2]));
        let book = LeafBook::default();
        book.issued(&pod("a"), now + Duration::from_secs(100), &old);
        book.issued(&pod("b"), now + Duration::from_secs(50), &old);
        assert_eq!(
            book.summary(&new, now),
            Leaves {
                oldest_expiry: Some(now + Duration::from_secs(50)),
                current: 0,
                previous: 2
            }
        );
        // Pod a renews under the new issuer: it no longer counts as previous.
        book.issued(&pod("a"), now + Duration::from_secs(200), &new);
        let s = book.summary(&new, now);
        assert_eq!((s.current, s.previous), (1, 1));
        // Pod b's certificate expires.
        let s = book.summary(&new, now + Duration::from_secs(60));
        assert_eq!((s.current, s.previous), (1, 0));
        assert_eq!(s.oldest_expiry, Some(now + Duration::from_secs(200)));
    }

    #[test]
    fn a_forgotten_pod_no_longer_holds_the_rotation() {
        let now = SystemTime::now();
        let (old, new) = (CertificateDer::from(vec![1]), CertificateDer::from(vec![2]));
        let book = LeafBook::default();
        book.issued(&pod("a"), now + Duration::from_secs(100), &old);
        book.issued(&pod("b"), now + Duration::from_secs(100), &new);
        let waiting = book.previous_pods(&new, 10);
        assert_eq!(waiting, vec![("shop".to_owned(), "a".to_owned())]);
        assert!(book.previous_pods(&new, 0).is_empty(), "at most max");
        book.forget(&waiting[0]);
        let s = book.summary(&new, now);
        assert_eq!((s.current, s.previous), (1, 0));
    }
}
