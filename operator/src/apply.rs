//! The only writes to children: server-side apply with one field manager, and pruning of children
//! the current spec no longer wants.

use crate::{Error, FIELD_MANAGER, Result};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Server-side applies `obj` (forcing ownership of the fields we set) and returns the stored object.
/// Applying an unchanged object is a no-op on the server: its resourceVersion stays.
pub(crate) async fn apply<K>(client: &Client, obj: &K) -> Result<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
{
    let ns = obj
        .meta()
        .namespace
        .clone()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingMetadata("name"))?;
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|source| Error::Apply {
        what: format!("{} {ns}/{name}", K::kind(&())),
        source,
    })
}

/// Deletes the objects of kind `K` that match `selector`, are controlled by `owner_uid`, and are not
/// named in `keep`. Returns the names deleted.
pub(crate) async fn prune<K>(
    client: &Client,
    ns: &str,
    selector: &str,
    owner_uid: &str,
    keep: &[String],
) -> Result<Vec<String>>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let what = || format!("{} in {ns} with {selector}", K::kind(&()));
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|source| Error::Prune {
            what: what(),
            source,
        })?;
    let mut deleted = Vec::new();
    for obj in list.items {
        let owned = obj
            .owner_references()
            .iter()
            .any(|r| r.uid == owner_uid && r.controller == Some(true));
        let name = obj.name_any();
        if owned && !keep.contains(&name) {
            delete::<K>(client, ns, &name).await?;
            deleted.push(name);
        }
    }
    Ok(deleted)
}

/// Deletes `ns/name` of kind `K` in the background; one already gone counts as deleted.
pub(crate) async fn delete<K>(client: &Client, ns: &str, name: &str) -> Result<()>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        // Already gone: the goal is reached.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Prune {
            what: format!("delete {} {ns}/{name}", K::kind(&())),
            source,
        }),
    }
}
