//! Routes for the unit tests of `delta` and `hub`.

use switchyard_protocol::control::v1::{Endpoint, Route};

/// `event` routed to Manager `m` (pool `m-manager`) at `addrs`, not durable.
pub(super) fn route(event: &str, addrs: &[&str]) -> Route {
    Route {
        event_type: event.into(),
        manager: "m".into(),
        pool: "m-manager".into(),
        endpoints: addrs
            .iter()
            .map(|a| Endpoint {
                address: (*a).into(),
                pod: String::new(),
            })
            .collect(),
        durable: None,
        subscription: None,
        push: Vec::new(),
    }
}
