//! Names, labels and owner references shared by every child.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub use switchyard_protocol::labels::{
    CONFIG_HASH, EVENT_TYPE, INSTANCE, MANAGED_BY, MANAGER, NAME, ROUTER,
};

/// Longest Router or Manager name: children append at most `-manager-config` (15 chars) and Service
/// names must stay DNS-1035 labels of at most 63 characters.
pub(crate) const MAX_NAME_LEN: usize = 47;

/// Selector labels of a component's pods: stable for the life of the resource.
pub(crate) fn selector(kind_label: &str, name: &str) -> BTreeMap<String, String> {
    let component = if kind_label == ROUTER {
        "switchyard-router"
    } else {
        "switchyard-manager"
    };
    BTreeMap::from([
        (NAME.to_owned(), component.to_owned()),
        (INSTANCE.to_owned(), name.to_owned()),
        (kind_label.to_owned(), name.to_owned()),
    ])
}

/// All labels of a child: the selector plus `managed-by`.
pub(crate) fn labels(kind_label: &str, name: &str) -> BTreeMap<String, String> {
    let mut l = selector(kind_label, name);
    l.insert(MANAGED_BY.to_owned(), crate::FIELD_MANAGER.to_owned());
    l
}

/// Metadata of a child object, owned by `owner`.
pub(crate) fn child_meta<K: Resource<DynamicType = ()>>(
    owner: &K,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, crate::Error> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(
            owner
                .meta()
                .namespace
                .clone()
                .ok_or(crate::Error::MissingMetadata("namespace"))?,
        ),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref(owner)?]),
        ..ObjectMeta::default()
    })
}

/// A controller owner reference with blockOwnerDeletion, so foreground deletion waits for children.
pub(crate) fn owner_ref<K: Resource<DynamicType = ()>>(
    owner: &K,
) -> Result<OwnerReference, crate::Error> {
    let mut r = owner
        .controller_owner_ref(&())
        .ok_or(crate::Error::MissingMetadata("uid"))?;
    r.block_owner_deletion = Some(true);
    Ok(r)
}

/// Short, stable content hash (SHA-256, 16 hex digits).
pub fn hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Renders a label map as a selector string (`a=b,c=d`), as the scale subresource wants it.
pub(crate) fn selector_string(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_short() {
        assert_eq!(hash("abc"), "ba7816bf8f01cfea");
        assert_ne!(hash("abc"), hash("abd"));
    }

    #[test]
    fn selector_string_is_sorted() {
        let l = selector(ROUTER, "edge");
        assert_eq!(
            selector_string(&l),
            "app.kubernetes.io/instance=edge,app.kubernetes.io/name=switchyard-router,switchyard.dev/router=edge"
        );
    }
}
