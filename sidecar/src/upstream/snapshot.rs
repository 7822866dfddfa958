//! One routing table as the hot path reads it (event type -> pool), swapped whole when a new one
//! arrives, and its description for `GET /routes`.

use super::pool::Pool;
use super::subscribers::{Spec, Sub};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use switchyard_protocol::durable::DurableRoute;

/// Where the routing table came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TableSource {
    /// The rendered config: static endpoints (local mode) or the Managers' Service DNS names.
    Config,
    /// The operator's control-plane stream.
    ControlPlane,
}

/// One route, for `/routes`.
#[derive(Clone, Debug)]
pub(crate) struct RouteInfo {
    /// Event type.
    pub event: String,
    /// Manager handling it.
    pub manager: String,
    /// Name of its pool (key into [`Table::pools`]).
    pub pool: String,
    /// Set when the type's publishes go to its Manager's stream.
    pub durable: Option<Arc<DurableRoute>>,
    /// Set on a subscriber's route (`event` is then its key, `<event>@<manager>`).
    pub subscription: Option<Spec>,
}

/// An immutable routing table.
pub(crate) struct Table {
    /// The control plane's version (0 for the config's table).
    pub version: u64,
    /// Where it came from.
    pub source: TableSource,
    /// Pools by name; shared with the next table when the name stays.
    pub pools: BTreeMap<String, Arc<Pool>>,
    /// Event type -> pool: the hot-path lookup.
    pub by_event: HashMap<String, Arc<Pool>>,
    /// Event type -> (Manager, durable route) of the types delivered durably: a publish of one
    /// goes to that Manager's stream.
    pub durable: HashMap<String, (Arc<str>, Arc<DurableRoute>)>,
    /// The subscribers, in key order: every publish (request, answer) is matched against them.
    pub subscribers: Vec<Arc<Sub>>,
    /// Routes sorted by event type (subscribers' by their key).
    pub routes: Vec<RouteInfo>,
}

/// The `/routes` document.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoutesView {
    /// Router name.
    pub router: String,
    /// Router namespace.
    pub namespace: String,
    /// Where the table came from.
    pub source: TableSource,
    /// Control-plane version of the table (0: from the config).
    pub version: u64,
    /// The control plane followed, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneView>,
    /// Routes by event type.
    pub routes: Vec<RouteView>,
}

/// State of the control-plane stream.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ControlPlaneView {
    /// Its URL.
    pub url: String,
    /// Whether the stream is open now (false: serving from the last table).
    pub connected: bool,
    /// Tables received since start.
    pub tables_received: u64,
}

/// One route of `/routes`.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RouteView {
    /// Event type.
    pub event_type: String,
    /// Manager.
    pub manager: String,
    /// Pool name.
    pub pool: String,
    /// Set when its publishes go to the Manager's JetStream stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durable: Option<DurableRoute>,
    /// Set on a subscriber's route: what it observes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription: Option<SubscriptionView>,
    /// Endpoints of the pool.
    pub endpoints: Vec<EndpointView>,
}

/// A subscriber's route in `/routes`.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubscriptionView {
    /// The type or pattern observed.
    pub event: String,
    /// What is observed.
    pub observe: Vec<&'static str>,
    /// The filter, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<switchyard_crds::subscription::Filter>,
}

/// One endpoint of `/routes`.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndpointView {
    /// `host:port`.
    pub address: String,
    /// Whether a frame connection to it is open.
    pub connected: bool,
}

impl Table {
    /// The routes with their pools' current endpoints.
    pub(crate) fn route_views(&self) -> Vec<RouteView> {
        self.routes
            .iter()
            .map(|r| {
                let mut endpoints: Vec<EndpointView> = self
                    .pools
                    .get(&r.pool)
                    .map(|p| {
                        p.snapshot()
                            .iter()
                            .map(|peer| EndpointView {
                                address: peer.addr.clone(),
                                connected: peer.usable().is_some(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                endpoints.sort_by(|a, b| a.address.cmp(&b.address));
                RouteView {
                    event_type: r.event.clone(),
                    manager: r.manager.clone(),
                    pool: r.pool.clone(),
                    durable: r.durable.as_deref().cloned(),
                    subscription: r.subscription.as_ref().map(|s| SubscriptionView {
                        event: s.event.clone(),
                        observe: s.observe.iter().map(|o| o.as_str()).collect(),
                        filter: s.filter.clone(),
                    }),
                    endpoints,
                }
            })
            .collect()
    }
}
