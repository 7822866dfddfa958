//! Which Manager watch events can change a Router's rendered children: a Router renders from its
//! Managers' specs, never their status, so a status write (the Manager controller's replica
//! counts, the autoscaler's figures, each pod turning Ready at 1,000 Managers) must not re-render
//! and re-apply a Router's config built from hundreds of Managers (pure).
//!
//! Not kube's generation predicate: that one drops deletions (a deleted object keeps its
//! generation), and a Router must stop routing to a Manager that is gone.

use kube::ResourceExt;
use kube::runtime::watcher::Event;
use std::collections::HashMap;

/// What was last seen of each Manager: its generation and whether it was being deleted.
#[derive(Default)]
pub(super) struct SpecChanges {
    seen: HashMap<Key, Seen>,
    /// During a relist, what was seen before it: objects not listed again are forgotten at its end.
    before: Option<HashMap<Key, Seen>>,
}

type Key = (String, String);
type Seen = (Option<i64>, bool);

impl SpecChanges {
    /// The objects of `event` that may change what their Router renders.
    pub(super) fn admit<K: kube::Resource>(&mut self, event: Event<K>) -> Vec<K> {
        match event {
            Event::Init => {
                self.before = Some(std::mem::take(&mut self.seen));
                Vec::new()
            }
            Event::InitDone => {
                self.before = None;
                Vec::new()
            }
            Event::Apply(obj) | Event::InitApply(obj) => {
                let key = (obj.namespace().unwrap_or_default(), obj.name_any());
                let now = (
                    obj.meta().generation,
                    obj.meta().deletion_timestamp.is_some(),
                );
                let before = match self.before.as_mut() {
                    Some(b) => b.remove(&key).or_else(|| self.seen.get(&key).copied()),
                    None => self.seen.get(&key).copied(),
                };
                self.seen.insert(key, now);
                if before == Some(now) {
                    Vec::new()
                } else {
                    vec![obj]
                }
            }
            Event::Delete(obj) => {
                self.seen
                    .remove(&(obj.namespace().unwrap_or_default(), obj.name_any()));
                vec![obj]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn obj(name: &str, generation: i64, deleting: bool) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                generation: Some(generation),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_status_write_is_dropped_a_spec_change_passes() {
        let mut f = SpecChanges::default();
        assert_eq!(
            f.admit(Event::InitApply(obj("m", 1, false))).len(),
            1,
            "first sight"
        );
        assert!(
            f.admit(Event::Apply(obj("m", 1, false))).is_empty(),
            "same generation"
        );
        assert_eq!(
            f.admit(Event::Apply(obj("m", 2, false))).len(),
            1,
            "spec changed"
        );
        assert!(f.admit(Event::<ConfigMap>::Init).is_empty());
    }

    #[test]
    fn deletion_passes_and_is_forgotten() {
        let mut f = SpecChanges::default();
        f.admit(Event::Apply(obj("m", 1, false)));
        assert_eq!(
            f.admit(Event::Apply(obj("m", 1, true))).len(),
            1,
            "being deleted"
        );
        assert_eq!(f.admit(Event::Delete(obj("m", 1, true))).len(), 1, "gone");
        assert_eq!(
            f.admit(Event::Apply(obj("m", 1, false))).len(),
            1,
            "back again"
        );
    }

    #[test]
    fn a_relist_passes_only_what_changed_and_forgets_the_rest() {
        let mut f = SpecChanges::default();
        f.admit(Event::Apply(obj("a", 1, false)));
        f.admit(Event::Apply(obj("b", 1, false)));
        f.admit(Event::<ConfigMap>::Init);
        assert!(f.admit(Event::InitApply(obj("a", 1, false))).is_empty());
        f.admit(Event::<ConfigMap>::InitDone);
        assert_eq!(f.seen.len(), 1, "b was not listed again");
        assert_eq!(f.admit(Event::Apply(obj("b", 1, false))).len(), 1);
    }
}
