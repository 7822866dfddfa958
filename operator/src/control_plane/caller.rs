//! Who is calling the control plane, and what each caller may ask of it (pure). Every RPC reads
//! its caller here first ([`Caller::of`]) and checks it here.
//!
//! With mesh TLS the caller is the workload its client certificate names: a Router's sidecar gets
//! only its Router's table, a Manager's sidecar only the table of the Router its Manager names, and
//! load reports and activations are taken only for the caller's own pod. A call another replica
//! forwarded (see `forward`) was checked there; only an operator's certificate may say it forwarded
//! one, so a sidecar cannot skip its checks by setting the header. Whatever the caller, a load
//! report must hold figures in bounds; entries for event types its owner does not have are dropped
//! (and counted), so a report can never scale a Manager through a type it does not route or handle.

use super::directory::Directory;
use super::forward::FORWARDED;
use super::table::RouterKey;
use switchyard_crds::subscription::pattern_matches;
use switchyard_identity::incoming::PeerInfo;
use switchyard_identity::{Kind, Peer};
use switchyard_protocol::control::v1::{ActivateRequest, LoadReport, WatchRoutesRequest};
use tonic::{Code, Request, Status};

/// Largest control-plane message decoded (a load report of 64 event types is about 6 KiB).
pub(crate) const MAX_MESSAGE: usize = 64 * 1024;
/// Most event types in one load report.
pub(crate) const MAX_EVENTS: usize = 256;
/// Largest arrival rate believed, per second and event type.
pub(crate) const MAX_RATE: f64 = 10_000_000.0;
/// Largest latency believed, in milliseconds (a day).
pub(crate) const MAX_LATENCY_MS: f64 = 86_400_000.0;
/// Largest in-flight or queued count believed.
pub(crate) const MAX_COUNT: u32 = 1_000_000;
/// Longest report window, in milliseconds.
pub(crate) const MAX_WINDOW_MS: u32 = 60_000;

/// Who the client of a call is.
#[derive(Clone, Debug)]
pub(crate) enum Identity {
    /// Mesh TLS is off: callers are not known, and not checked.
    Anyone,
    /// Mesh TLS is on and the client sent no certificate (only Certify may be called so).
    Nobody,
    /// The workload the client certificate names.
    Workload(Peer),
}

/// The origin of one call.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    /// Another operator replica says it passed this call on (see `forward`); it is never forwarded
    /// again, and with mesh TLS believed only from an operator's certificate.
    pub forwarded: bool,
    /// Who the client is.
    pub identity: Identity,
}

impl Caller {
    /// The caller of `request`; with `mesh`, known by its client certificate.
    pub(crate) fn of<T>(request: &Request<T>, mesh: bool) -> Caller {
        let info = request.extensions().get::<PeerInfo>();
        let identity = match (mesh, info.and_then(|i| i.peer.clone())) {
            (false, _) => Identity::Anyone,
            (true, Some(peer)) => Identity::Workload(peer),
            (true, None) => Identity::Nobody,
        };
        Caller {
            forwarded: request.metadata().get(FORWARDED).is_some(),
            identity,
        }
    }

    /// For logs: the identity, or what stands for it.
    pub(crate) fn shown(&self) -> String {
        match &self.identity {
            Identity::Workload(p) => p.id.uri(),
            Identity::Nobody => "a client without a certificate".into(),
            Identity::Anyone => "a client".into(),
        }
    }
}

/// A refused call: the gRPC code, a metric label and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The status code.
    pub code: Code,
    /// Metric label: `unauthenticated`, `not_allowed`, `spoofed`, `bounds`, `unknown_event`,
    /// `oversized`.
    pub reason: &'static str,
    /// For the caller.
    pub message: String,
}

impl Refusal {
    fn new(code: Code, reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            reason,
            message: message.into(),
        }
    }

    /// As a gRPC status.
    pub(crate) fn status(&self) -> Status {
        Status::new(self.code, self.message.clone())
    }
}

/// The workload whose checks apply: `None` when nobody's do (mesh TLS off, or a call an operator
/// replica forwarded after checking it).
fn workload(caller: &Caller) -> Result<Option<&Peer>, Refusal> {
    match &caller.identity {
        Identity::Anyone => Ok(None),
        Identity::Nobody => Err(Refusal::new(
            Code::Unauthenticated,
            "unauthenticated",
            "a mesh client certificate is required; get one from the Identity service first",
        )),
        Identity::Workload(p) if caller.forwarded => {
            if p.id.kind == Kind::Operator {
                Ok(None)
            } else {
                Err(Refusal::new(
                    Code::PermissionDenied,
                    "spoofed",
                    format!(
                        "{} says it forwarded this call; only an operator replica does",
                        p.id
                    ),
                ))
            }
        }
        Identity::Workload(p) => Ok(Some(p)),
    }
}

/// `pod`, when given, must be the caller's own (the certificate's common name).
fn own_pod(peer: &Peer, pod: &str) -> Result<(), Refusal> {
    if !pod.is_empty() && peer.pod.as_deref() != Some(pod) {
        return Err(Refusal::new(
            Code::PermissionDenied,
            "spoofed",
            format!(
                "{} is pod {:?}, not {pod:?}",
                peer.id,
                peer.pod.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// Whether `caller` may follow the table of Router `req.namespace/req.router`.
pub(crate) fn watch(
    caller: &Caller,
    req: &WatchRoutesRequest,
    dir: &Directory,
) -> Result<(), Refusal> {
    let Some(peer) = workload(caller)? else {
        return Ok(());
    };
    let id = &peer.id;
    let allowed = id.namespace == req.namespace
        && match id.kind {
            Kind::Router => id.name == req.router,
            // A Manager's sidecar routes its app's events and dead letters through its Router.
            Kind::Manager => dir
                .managers
                .get(&RouterKey {
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                })
                .is_some_and(|m| m.router == req.router),
            Kind::Operator | Kind::JetStream => false,
        };
    if !allowed {
        return Err(Refusal::new(
            Code::PermissionDenied,
            "not_allowed",
            format!(
                "{id} may not read the table of Router {}/{}",
                req.namespace, req.router
            ),
        ));
    }
    own_pod(peer, &req.pod)
}

/// Whether `caller` may ask for a pod for `req.event_type`: a sidecar of that Router for an event
/// type it routes (its requests, and the observer copies of them), or a sidecar of one of the
/// Router's Managers (its app's publishes and dead letters, which need not be the Router's routes).
/// Naming a subscribing Manager (`req.manager`), the Manager must be the Router's and take the type.
pub(crate) fn activate(
    caller: &Caller,
    req: &ActivateRequest,
    dir: &Directory,
) -> Result<(), Refusal> {
    let mut from_manager = false;
    if let Some(peer) = workload(caller)? {
        let id = &peer.id;
        let allowed = id.namespace == req.namespace
            && match id.kind {
                Kind::Router => id.name == req.router,
                Kind::Manager => {
                    from_manager = true;
                    dir.managers
                        .get(&RouterKey {
                            namespace: id.namespace.clone(),
                            name: id.name.clone(),
                        })
                        .is_some_and(|m| m.router == req.router)
                }
                Kind::Operator | Kind::JetStream => false,
            };
        if !allowed {
            return Err(Refusal::new(
                Code::PermissionDenied,
                "spoofed",
                format!(
                    "{id} may not activate for Router {}/{}",
                    req.namespace, req.router
                ),
            ));
        }
        own_pod(peer, &req.pod)?;
    }
    if !req.manager.is_empty() {
        return subscribed(req, dir);
    }
    let routed = if from_manager {
        dir.managers.iter().any(|(k, m)| {
            k.namespace == req.namespace
                && m.router == req.router
                && m.events.contains(&req.event_type)
        })
    } else {
        dir.routers
            .get(&RouterKey {
                namespace: req.namespace.clone(),
                name: req.router.clone(),
            })
            .is_some_and(|events| events.contains(&req.event_type))
    };
    if !routed {
        return Err(Refusal::new(
            Code::InvalidArgument,
            "unknown_event",
            format!(
                "Router {}/{} routes no event type {:?}",
                req.namespace, req.router, req.event_type
            ),
        ));
    }
    Ok(())
}

/// A subscriber's activation: the Manager must be one of the Router's and subscribe to the type
/// (or handle it), so a Router's sidecar can wake only the Managers its publishes reach.
fn subscribed(req: &ActivateRequest, dir: &Directory) -> Result<(), Refusal> {
    let key = RouterKey {
        namespace: req.namespace.clone(),
        name: req.manager.clone(),
    };
    let reached = dir.managers.get(&key).is_some_and(|m| {
        m.router == req.router
            && (m.events.contains(&req.event_type)
                || m.subscribed
                    .iter()
                    .any(|p| pattern_matches(p, &req.event_type)))
    });
    if reached {
        return Ok(());
    }
    Err(Refusal::new(
        Code::InvalidArgument,
        "unknown_subscriber",
        format!(
            "Manager {}/{} of Router {} neither handles nor subscribes to {:?}",
            req.namespace, req.manager, req.router, req.event_type
        ),
    ))
}

/// What a checked report lost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Entries dropped because their owner has no such event type.
    pub unknown_events: usize,
}

fn bounds(what: String) -> Refusal {
    Refusal::new(Code::InvalidArgument, "bounds", what)
}

fn in_range(value: f64, max: f64) -> bool {
    value.is_finite() && (0.0..=max).contains(&value)
}

/// Checks a load report from `caller` and drops its entries for event types the owner does not
/// have. A report for another pod, or with a figure out of bounds, is refused whole.
pub(crate) fn report(
    caller: &Caller,
    report: &mut LoadReport,
    dir: &Directory,
) -> Result<Checked, Refusal> {
    let kind = match report.role.as_str() {
        "router" => Kind::Router,
        "manager" => Kind::Manager,
        other => {
            return Err(bounds(format!(
                "role {other:?} is neither \"router\" nor \"manager\""
            )));
        }
    };
    if let Some(peer) = workload(caller)? {
        let id = &peer.id;
        if id.kind != kind || id.namespace != report.namespace || id.name != report.owner {
            return Err(Refusal::new(
                Code::PermissionDenied,
                "spoofed",
                format!(
                    "{id} may not report load as the {} of {}/{}",
                    report.role, report.namespace, report.owner
                ),
            ));
        }
        own_pod(peer, &report.pod)?;
    }
    if report.events.len() > MAX_EVENTS {
        return Err(bounds(format!(
            "{} event types in one report; at most {MAX_EVENTS}",
            report.events.len()
        )));
    }
    if report.window_ms == 0 || report.window_ms > MAX_WINDOW_MS {
        return Err(bounds(format!(
            "window_ms {} is not within 1..={MAX_WINDOW_MS}",
            report.window_ms
        )));
    }
    for e in &report.events {
        let field = |f: &str| format!("{}: {f}", e.event_type);
        if !in_range(e.arrivals_per_second, MAX_RATE) {
            return Err(bounds(format!(
                "{} {} is not within 0..={MAX_RATE}",
                field("arrivals_per_second"),
                e.arrivals_per_second
            )));
        }
        for (name, v) in [
            ("latency_p50_ms", e.latency_p50_ms),
            ("latency_p99_ms", e.latency_p99_ms),
        ] {
            if !in_range(v, MAX_LATENCY_MS) {
                return Err(bounds(format!(
                    "{} {v} is not within 0..={MAX_LATENCY_MS}",
                    field(name)
                )));
            }
        }
        for (name, v) in [("in_flight", e.in_flight), ("queued", e.queued)] {
            if v > MAX_COUNT {
                return Err(bounds(format!(
                    "{} {v} is more than {MAX_COUNT}",
                    field(name)
                )));
            }
        }
    }
    let key = RouterKey {
        namespace: report.namespace.clone(),
        name: report.owner.clone(),
    };
    let before = report.events.len();
    match kind {
        Kind::Router => {
            let known = dir.routers.get(&key);
            report
                .events
                .retain(|e| known.is_some_and(|k| k.contains(&e.event_type)));
        }
        // A Manager's pods report its handled types and its subscriptions (a pattern as written).
        _ => {
            let known = dir.managers.get(&key);
            report
                .events
                .retain(|e| known.is_some_and(|m| m.reports(&e.event_type)));
        }
    }
    Ok(Checked {
        unknown_events: before - report.events.len(),
    })
}

/// The refusal of a message over [`MAX_MESSAGE`] (tonic's decoder refuses it with OUT_OF_RANGE).
pub(crate) fn oversized(status: &Status) -> Option<Refusal> {
    (status.code() == Code::OutOfRange && status.message().contains("too large")).then(|| {
        Refusal::new(
            Code::OutOfRange,
            "oversized",
            format!(
                "messages are limited to {MAX_MESSAGE} bytes: {}",
                status.message()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::directory::ManagerEntry;
    use super::*;
    use std::collections::BTreeSet;
    use switchyard_identity::SpiffeId;
    use switchyard_protocol::control::v1::EventLoad;

    fn key(ns: &str, name: &str) -> RouterKey {
        RouterKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn dir() -> Directory {
        let mut d = Directory::default();
        d.routers
            .insert(key("shop", "edge"), BTreeSet::from(["noop".to_owned()]));
        d.managers.insert(
            key("shop", "handlers"),
            ManagerEntry {
                router: "edge".into(),
                events: BTreeSet::from(["noop".to_owned(), "echo".to_owned()]),
                subscribed: BTreeSet::from(["orders.*".to_owned()]),
            },
        );
        d
    }

    fn direct(identity: Identity) -> Caller {
        Caller {
            forwarded: false,
            identity,
        }
    }

    fn peer(ns: &str, kind: Kind, name: &str, pod: &str) -> Caller {
        direct(Identity::Workload(Peer {
            id: SpiffeId::new("td", ns, kind, name).expect("id"),
            pod: Some(pod.into()),
        }))
    }

    fn watch_req(ns: &str, router: &str, pod: &str) -> WatchRoutesRequest {
        WatchRoutesRequest {
            namespace: ns.into(),
            router: router.into(),
            pod: pod.into(),
            deltas: false,
            parts: false,
        }
    }

    #[test]
    fn a_sidecar_reads_only_its_routers_table() {
        let d = dir();
        let router = peer("shop", Kind::Router, "edge", "edge-1");
        assert!(watch(&router, &watch_req("shop", "edge", "edge-1"), &d).is_ok());
        let other = watch(&router, &watch_req("shop", "admin", "edge-1"), &d).expect_err("other");
        assert_eq!(
            (other.code, other.reason),
            (Code::PermissionDenied, "not_allowed")
        );
        assert!(other.message.contains("admin"), "{}", other.message);
        assert!(watch(&router, &watch_req("prod", "edge", "edge-1"), &d).is_err());
        let manager = peer("shop", Kind::Manager, "handlers", "h-1");
        assert!(watch(&manager, &watch_req("shop", "edge", "h-1"), &d).is_ok());
        assert!(watch(&manager, &watch_req("shop", "admin", "h-1"), &d).is_err());
        let unknown = peer("shop", Kind::Manager, "new", "n-1");
        assert!(watch(&unknown, &watch_req("shop", "edge", "n-1"), &d).is_err());
        let spoof = watch(&router, &watch_req("shop", "edge", "edge-2"), &d).expect_err("pod");
        assert_eq!(spoof.reason, "spoofed");
        let none = watch(
            &direct(Identity::Nobody),
            &watch_req("shop", "edge", ""),
            &d,
        )
        .expect_err("none");
        assert_eq!(none.code, Code::Unauthenticated);
        assert!(watch(&direct(Identity::Anyone), &watch_req("x", "y", ""), &d).is_ok());
    }

    fn report_of(role: &str, ns: &str, owner: &str, pod: &str, events: &[&str]) -> LoadReport {
        LoadReport {
            pod: pod.into(),
            namespace: ns.into(),
            role: role.into(),
            owner: owner.into(),
            timestamp_ms: 1,
            window_ms: 1000,
            events: events
                .iter()
                .map(|e| EventLoad {
                    event_type: (*e).into(),
                    arrivals_per_second: 3.0,
                    in_flight: 1,
                    queued: 0,
                    latency_p50_ms: 1.0,
                    latency_p99_ms: 2.0,
                    shed: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn load_reports_only_for_the_callers_own_pod() {
        let d = dir();
        let me = peer("shop", Kind::Manager, "handlers", "h-1");
        let mut ok = report_of("manager", "shop", "handlers", "h-1", &["noop", "echo"]);
        assert_eq!(report(&me, &mut ok, &d), Ok(Checked::default()));
        // A subscription's load is reported under its event as written, a pattern included.
        let events = ["orders.*", "orders.created", "noop"];
        let mut sub = report_of("manager", "shop", "handlers", "h-1", &events);
        let checked = report(&me, &mut sub, &d).expect("subscription load");
        assert_eq!(
            checked.unknown_events, 1,
            "orders.created is no subscription's event"
        );
        let kept: Vec<&str> = sub.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(kept, ["orders.*", "noop"]);
        for mut spoofed in [
            report_of("manager", "shop", "handlers", "h-2", &["noop"]),
            report_of("manager", "shop", "billing", "h-1", &["noop"]),
            report_of("router", "shop", "edge", "h-1", &["noop"]),
            report_of("manager", "prod", "handlers", "h-1", &["noop"]),
        ] {
            let e = report(&me, &mut spoofed, &d).expect_err("spoofed");
            assert_eq!(
                (e.code, e.reason),
                (Code::PermissionDenied, "spoofed"),
                "{spoofed:?}"
            );
        }
    }

    #[test]
    fn figures_out_of_bounds_are_refused_and_unknown_types_dropped() {
        let d = dir();
        let mut r = report_of(
            "manager",
            "shop",
            "handlers",
            "h-1",
            &["noop", "orders.create"],
        );
        let checked = report(&direct(Identity::Anyone), &mut r, &d).expect("checked");
        assert_eq!(checked.unknown_events, 1);
        assert_eq!(r.events.len(), 1);
        let mut nan = report_of("manager", "shop", "handlers", "h-1", &["noop"]);
        nan.events[0].arrivals_per_second = f64::NAN;
        let e = report(&direct(Identity::Anyone), &mut nan, &d).expect_err("nan");
        assert_eq!(e.reason, "bounds");
        assert!(
            e.message.contains("noop: arrivals_per_second"),
            "{}",
            e.message
        );
        let mut huge = report_of("router", "shop", "edge", "e-1", &["noop"]);
        huge.events[0].in_flight = u32::MAX;
        assert!(report(&direct(Identity::Anyone), &mut huge, &d).is_err());
        let mut neg = report_of("router", "shop", "edge", "e-1", &["noop"]);
        neg.events[0].latency_p99_ms = -1.0;
        assert!(report(&direct(Identity::Anyone), &mut neg, &d).is_err());
        let mut many = report_of("router", "shop", "edge", "e-1", &[]);
        many.events = vec![huge.events[0].clone(); MAX_EVENTS + 1];
        assert!(report(&direct(Identity::Anyone), &mut many, &d).is_err());
        let mut window = report_of("router", "shop", "edge", "e-1", &["noop"]);
        window.window_ms = 0;
        assert!(report(&direct(Identity::Anyone), &mut window, &d).is_err());
        let mut role = report_of("admin", "shop", "edge", "e-1", &["noop"]);
        assert_eq!(
            report(&direct(Identity::Anyone), &mut role, &d).map_err(|e| e.reason),
            Err("bounds")
        );
    }

    #[test]
    fn activations_only_from_the_routers_own_sidecars_for_its_routes() {
        let d = dir();
        let req = |router: &str, pod: &str, event: &str| ActivateRequest {
            namespace: "shop".into(),
            router: router.into(),
            pod: pod.into(),
            event_type: event.into(),
            held: 1,
            manager: String::new(),
        };
        let me = peer("shop", Kind::Router, "edge", "edge-1");
        assert!(activate(&me, &req("edge", "edge-1", "noop"), &d).is_ok());
        assert_eq!(
            activate(&me, &req("admin", "edge-1", "noop"), &d).map_err(|e| e.reason),
            Err("spoofed")
        );
        // A Manager of the Router, for its app's publishes: of a type a Manager of the Router handles.
        let manager = peer("shop", Kind::Manager, "handlers", "h-1");
        assert!(activate(&manager, &req("edge", "h-1", "echo"), &d).is_ok());
        assert_eq!(
            activate(&manager, &req("edge", "h-1", "payments.done"), &d).map_err(|e| e.reason),
            Err("unknown_event")
        );
        assert_eq!(
            activate(&manager, &req("admin", "h-1", "noop"), &d).map_err(|e| e.reason),
            Err("spoofed"),
            "not its Router"
        );
        let stranger = peer("shop", Kind::Manager, "nobody", "n-1");
        assert_eq!(
            activate(&stranger, &req("edge", "n-1", "noop"), &d).map_err(|e| e.reason),
            Err("spoofed")
        );
        let operator = peer("shop", Kind::Operator, "switchyard", "op-1");
        assert!(activate(&operator, &req("edge", "op-1", "noop"), &d).is_err());
        assert_eq!(
            activate(&me, &req("edge", "edge-1", "other"), &d).map_err(|e| e.reason),
            Err("unknown_event")
        );
    }

    #[test]
    fn a_subscribers_activation_names_a_manager_of_the_router_that_subscribes() {
        let mut d = dir();
        d.routers
            .get_mut(&key("shop", "edge"))
            .expect("edge")
            .insert("orders.created".into());
        let me = peer("shop", Kind::Router, "edge", "edge-1");
        let req = |event: &str, manager: &str| ActivateRequest {
            namespace: "shop".into(),
            router: "edge".into(),
            pod: "edge-1".into(),
            event_type: event.into(),
            held: 1,
            manager: manager.into(),
        };
        assert!(activate(&me, &req("orders.created", "handlers"), &d).is_ok());
        assert!(activate(&me, &req("noop", "handlers"), &d).is_ok());
        // From a Manager's sidecar, for its app's publish of a type the Router does not route.
        let publisher = peer("shop", Kind::Manager, "handlers", "h-1");
        let mut from_app = req("orders.paid", "handlers");
        from_app.pod = "h-1".into();
        assert!(activate(&publisher, &from_app, &d).is_ok());
        for (event, manager) in [("orders.created", "nobody"), ("noop", "nobody")] {
            assert_eq!(
                activate(&me, &req(event, manager), &d).map_err(|e| e.reason),
                Err("unknown_subscriber"),
                "{event} {manager}"
            );
        }
        d.managers
            .get_mut(&key("shop", "handlers"))
            .expect("handlers")
            .router = "other".into();
        assert_eq!(
            activate(&me, &req("orders.created", "handlers"), &d).map_err(|e| e.reason),
            Err("unknown_subscriber")
        );
    }

    #[test]
    fn only_an_operator_replica_may_say_it_forwarded_a_call() {
        let d = dir();
        let forwarded = |c: Caller| Caller {
            forwarded: true,
            ..c
        };
        // Another pod's report, passed on by a standby that checked it: taken (bounds still apply).
        let operator = forwarded(peer("switchyard", Kind::Operator, "switchyard", "op-1"));
        let mut theirs = report_of("manager", "shop", "handlers", "h-2", &["noop"]);
        assert_eq!(report(&operator, &mut theirs, &d), Ok(Checked::default()));
        let mut wild = report_of("manager", "shop", "handlers", "h-2", &["noop"]);
        wild.events[0].queued = u32::MAX;
        assert_eq!(
            report(&operator, &mut wild, &d).map_err(|e| e.reason),
            Err("bounds")
        );
        // A sidecar setting the header to skip its checks.
        let sidecar = forwarded(peer("shop", Kind::Manager, "handlers", "h-1"));
        let mut spoof = report_of("manager", "shop", "handlers", "h-2", &["noop"]);
        let e = report(&sidecar, &mut spoof, &d).expect_err("not an operator");
        assert_eq!((e.code, e.reason), (Code::PermissionDenied, "spoofed"));
        assert!(
            e.message.contains("only an operator replica"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_decoders_size_refusal_is_recognised() {
        let s = Status::out_of_range(
            "Error, decoded message length too large: found 70000 bytes, the limit is: 65536 bytes",
        );
        assert_eq!(oversized(&s).map(|r| r.reason), Some("oversized"));
        assert!(oversized(&Status::cancelled("x")).is_none());
    }
}
