//! The keys and wire forms of routing tables, and (for tests) the tables computed from scratch:
//! the control plane keeps its tables incrementally (`index`); `all_tables` is the plain statement
//! of what they must equal, and the index's tests hold it to that.

use switchyard_protocol::control::v1::Subscription;

/// The tables computed from scratch: only the index's tests use them.
#[cfg(test)]
mod from_scratch;
#[cfg(test)]
pub(crate) use from_scratch::all_tables;

/// A Router by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RouterKey {
    /// Namespace of the Router.
    pub namespace: String,
    /// Name of the Router.
    pub name: String,
}

/// A subscription as a route carries it.
pub(crate) fn subscription_wire(s: &switchyard_crds::subscription::Subscription) -> Subscription {
    Subscription {
        event: s.event.clone(),
        observe: s.observe.iter().map(|o| o.as_str().to_owned()).collect(),
        filter: s
            .filter
            .as_ref()
            .and_then(|f| serde_json::to_string(f).ok())
            .unwrap_or_default(),
    }
}
