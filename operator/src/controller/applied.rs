//! What this replica last applied to each child, so a reconcile that would send the same object
//! again sends nothing (pure: times and versions are passed in).
//!
//! At 1,000 Managers almost every reconcile is a Deployment's status moving (a pod turned Ready),
//! and re-applying four unchanged children each time was most of the API server's requests: a
//! no-op server-side apply is not free there (decode, merge, compare with managed fields). A child
//! is skipped only when all three hold:
//! - what would be sent hashes the same as what was sent last;
//! - the live object, as the controller's watch sees it, is still the one that apply produced (its
//!   `resourceVersion`, or for a Deployment its `generation`, which status writes do not move): an
//!   edit by someone else, or a deletion, makes the next reconcile apply again;
//! - the last apply is younger than [`REAPPLY_AFTER`], which bounds how long drift the watch cannot
//!   see (a label edit on a Deployment, a child that is not watched) stays.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

/// An unchanged child is applied again after this long anyway.
pub(super) const REAPPLY_AFTER: Duration = Duration::from_secs(300);

/// Kind, namespace and name of a child.
pub(super) type ChildKey = (String, String, String);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    hash: u64,
    /// The live object's version right after the apply; `None` for a child the watch cannot see.
    version: Option<String>,
    at: Instant,
}

/// The last apply of every child, by this replica.
#[derive(Debug, Default)]
pub(super) struct Applied {
    entries: HashMap<ChildKey, Entry>,
    /// When entries too old to count were last dropped (children of deleted owners among them).
    swept: Option<Instant>,
}

/// Hash of what would be sent (the serialized object).
pub(super) fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl Applied {
    /// Whether `key` must be applied: its content `hash` or its `live` version (`None`: not seen
    /// by the watch, or a kind without one) differs from the last apply, or that apply is too old.
    pub(super) fn needs_apply(
        &self,
        key: &ChildKey,
        hash: u64,
        live: Option<&str>,
        watched: bool,
        now: Instant,
    ) -> bool {
        let Some(e) = self.entries.get(key) else {
            return true;
        };
        let fresh = now.saturating_duration_since(e.at) < REAPPLY_AFTER;
        let same_live = if watched {
            live.is_some() && e.version.as_deref() == live
        } else {
            true
        };
        !(fresh && e.hash == hash && same_live)
    }

    /// Records an apply of `key` that succeeded, with the version the API server answered. Entries
    /// too old to count are dropped now and then, so the children of deleted owners do not pile up.
    pub(super) fn record(
        &mut self,
        key: ChildKey,
        hash: u64,
        version: Option<String>,
        now: Instant,
    ) {
        if self
            .swept
            .is_none_or(|t| now.saturating_duration_since(t) >= REAPPLY_AFTER)
        {
            self.entries
                .retain(|_, e| now.saturating_duration_since(e.at) < REAPPLY_AFTER);
            self.swept = Some(now);
        }
        self.entries.insert(
            key,
            Entry {
                hash,
                version,
                at: now,
            },
        );
    }

    /// Forgets `key` (its apply failed): the next reconcile applies it.
    pub(super) fn forget(&mut self, key: &ChildKey) {
        self.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ChildKey {
        ("ConfigMap".into(), "shop".into(), name.into())
    }

    #[test]
    fn the_first_apply_is_always_sent() {
        let a = Applied::default();
        assert!(a.needs_apply(&key("m"), 1, Some("10"), true, Instant::now()));
    }

    #[test]
    fn the_same_object_on_the_same_live_version_is_not_sent_again() {
        let mut a = Applied::default();
        let t0 = Instant::now();
        a.record(key("m"), 7, Some("10".into()), t0);
        assert!(!a.needs_apply(&key("m"), 7, Some("10"), true, t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_changed_object_an_edit_a_deletion_or_age_send_it_again() {
        let mut a = Applied::default();
        let t0 = Instant::now();
        a.record(key("m"), 7, Some("10".into()), t0);
        let t1 = t0 + Duration::from_secs(1);
        assert!(a.needs_apply(&key("m"), 8, Some("10"), true, t1), "content");
        assert!(a.needs_apply(&key("m"), 7, Some("11"), true, t1), "edited");
        assert!(a.needs_apply(&key("m"), 7, None, true, t1), "deleted");
        assert!(
            a.needs_apply(&key("m"), 7, Some("10"), true, t0 + REAPPLY_AFTER),
            "too old"
        );
        assert!(a.needs_apply(&key("other"), 7, Some("10"), true, t1));
    }

    #[test]
    fn an_unwatched_child_is_judged_by_content_and_age() {
        let mut a = Applied::default();
        let t0 = Instant::now();
        a.record(key("np"), 3, None, t0);
        assert!(!a.needs_apply(&key("np"), 3, None, false, t0 + Duration::from_secs(5)));
        assert!(a.needs_apply(&key("np"), 4, None, false, t0 + Duration::from_secs(5)));
        assert!(a.needs_apply(&key("np"), 3, None, false, t0 + REAPPLY_AFTER));
    }

    #[test]
    fn forgetting_sends_it_again_and_old_entries_are_swept() {
        let mut a = Applied::default();
        let t0 = Instant::now();
        a.record(key("m"), 7, Some("10".into()), t0);
        a.record(key("n"), 7, Some("10".into()), t0);
        a.forget(&key("m"));
        assert!(a.needs_apply(&key("m"), 7, Some("10"), true, t0));
        assert!(!a.needs_apply(&key("n"), 7, Some("10"), true, t0));
        a.record(key("o"), 1, None, t0 + REAPPLY_AFTER);
        assert_eq!(a.entries.len(), 1, "n was too old to count: dropped");
    }

    #[test]
    fn fingerprints_follow_the_bytes() {
        assert_eq!(fingerprint(b"abc"), fingerprint(b"abc"));
        assert_ne!(fingerprint(b"abc"), fingerprint(b"abd"));
    }
}
