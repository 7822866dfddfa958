//! Who may ask the admin port for what (pure but for the refusal's count and its one log line).
//! The port is bound on the pod's address so that the kubelet can probe it and send the app's
//! preStop hook (`/drained`), and a scraper read `/metrics`; `/routes` and `/drain` are for someone
//! inside the pod only: the sidecar's own preStop hook (`switchyard-sidecar drain`), `kubectl
//! exec`, or `kubectl port-forward` (whose connections arrive on loopback). A refusal is an RFC 9457 problem body.

use crate::metrics::Metrics;
use crate::metrics::labels::AdminRefusedLabels;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Response, StatusCode, header};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The path that starts the manager's drain.
pub(super) const DRAIN: &str = "/drain";
/// The path that waits for the manager's drain. Open to anyone: it starts nothing, so a stranger
/// can only hold one connection (under the port's caps) for a bounded time, and the app's preStop
/// hook, an httpGet the kubelet sends from the node, must reach it.
pub(super) const DRAINED: &str = "/drained";
/// The path that shows the routing table.
pub(super) const ROUTES: &str = "/routes";
/// The path that streams the events through the sidecar (`switchyard tap`): their headers and
/// payloads are the app's business, so it is pod-local like `/routes`.
pub(super) const TAP: &str = "/tap";

/// Why an admin request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A pod-local path asked by a client outside the pod (403).
    NotLoopback(&'static str),
    /// `/drain` or `/tap` asked with another method than GET (405): a drain is started by the
    /// hook's GET only, so a stray POST or a crawler's HEAD never stops the sidecar by surprise.
    Method(&'static str),
}

impl Refusal {
    fn path(self) -> &'static str {
        match self {
            Refusal::NotLoopback(p) | Refusal::Method(p) => p,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Refusal::NotLoopback(_) => "not_loopback",
            Refusal::Method(_) => "method",
        }
    }

    /// The answer: a problem body naming the rule and who is served.
    pub(super) fn answer(self) -> Response<Full<Bytes>> {
        let (status, detail) = match self {
            Refusal::NotLoopback(path) => (
                StatusCode::FORBIDDEN,
                format!(
                    "{path} is served to clients inside the pod only (loopback: the sidecar's preStop hook, kubectl exec, kubectl port-forward)"
                ),
            ),
            Refusal::Method(path) => (
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{path} takes GET only"),
            ),
        };
        let code = status.as_u16();
        let mut resp = Response::new(Full::new(crate::problem::body(
            code,
            crate::problem::title(code),
            &detail,
        )));
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(crate::problem::CONTENT_TYPE),
        );
        if matches!(self, Refusal::Method(_)) {
            headers.insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        }
        resp
    }
}

/// Whether `peer` is inside the pod. A dual-stack socket reports an IPv4 client as
/// `::ffff:a.b.c.d`, so the address is made canonical first.
fn inside_the_pod(peer: IpAddr) -> bool {
    peer.to_canonical().is_loopback()
}

/// Checks a request for `path` with `method` from `peer`. Who comes first: a client outside the
/// pod learns nothing about what `/drain` would take.
pub(super) fn check(method: &Method, path: &str, peer: IpAddr) -> Result<(), Refusal> {
    let pod_local = match path {
        DRAIN => DRAIN,
        ROUTES => ROUTES,
        TAP => TAP,
        _ => return Ok(()),
    };
    if !inside_the_pod(peer) {
        return Err(Refusal::NotLoopback(pod_local));
    }
    if pod_local != ROUTES && method != Method::GET {
        return Err(Refusal::Method(pod_local));
    }
    Ok(())
}

/// Counts refusals, and logs the first one from outside the pod: a scanner or a misconfigured
/// hook would otherwise fill the log, and the counter already says how many followed.
#[derive(Default)]
pub(super) struct Refusals {
    warned: AtomicBool,
}

impl Refusals {
    /// Records `refusal` of a request from `peer`.
    pub(super) fn record(&self, metrics: &Metrics, refusal: Refusal, peer: IpAddr) {
        metrics
            .admin_refused
            .get_or_create(&AdminRefusedLabels {
                path: refusal.path(),
                reason: refusal.label(),
            })
            .inc();
        if matches!(refusal, Refusal::NotLoopback(_)) && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                %peer,
                path = refusal.path(),
                "admin path refused to a client outside the pod (later refusals are only counted: switchyard_admin_refused_total)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const NODE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn drain_and_routes_are_for_loopback_clients_only() {
        assert_eq!(
            check(&Method::GET, DRAIN, NODE),
            Err(Refusal::NotLoopback(DRAIN))
        );
        assert_eq!(
            check(&Method::GET, ROUTES, NODE),
            Err(Refusal::NotLoopback(ROUTES))
        );
        assert_eq!(
            check(&Method::GET, TAP, NODE),
            Err(Refusal::NotLoopback(TAP))
        );
        assert_eq!(check(&Method::GET, TAP, LOOPBACK), Ok(()));
        assert_eq!(
            check(&Method::POST, TAP, LOOPBACK),
            Err(Refusal::Method(TAP))
        );
        assert_eq!(check(&Method::GET, DRAIN, LOOPBACK), Ok(()));
        assert_eq!(
            check(&Method::GET, DRAIN, IpAddr::V6(Ipv6Addr::LOCALHOST)),
            Ok(())
        );
        // 127.0.0.1 through a dual-stack socket.
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert_eq!(check(&Method::GET, DRAIN, mapped), Ok(()));
        let mapped_node = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped());
        assert_eq!(
            check(&Method::GET, DRAIN, mapped_node),
            Err(Refusal::NotLoopback(DRAIN))
        );
    }

    #[test]
    fn probes_metrics_and_drained_stay_open_to_anyone() {
        for path in [
            "/healthz", "/readyz", "/metrics", DRAINED, "/drainx", "/drain/",
        ] {
            assert_eq!(check(&Method::GET, path, NODE), Ok(()), "{path}");
        }
    }

    #[test]
    fn drain_takes_get_only_and_strangers_hear_403_whatever_the_method() {
        for m in [Method::POST, Method::HEAD, Method::PUT, Method::DELETE] {
            assert_eq!(
                check(&m, DRAIN, LOOPBACK),
                Err(Refusal::Method(DRAIN)),
                "{m}"
            );
            assert_eq!(
                check(&m, DRAIN, NODE),
                Err(Refusal::NotLoopback(DRAIN)),
                "{m}"
            );
        }
    }

    #[tokio::test]
    async fn refusals_are_problem_bodies() {
        let resp = Refusal::NotLoopback(DRAIN).answer();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            resp.headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(crate::problem::CONTENT_TYPE.as_bytes())
        );
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["status"], 403);
        assert!(
            v["detail"]
                .as_str()
                .is_some_and(|d| d.contains("/drain") && d.contains("inside the pod")),
            "{v}"
        );
        let resp = Refusal::Method(DRAIN).answer();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            resp.headers().get(header::ALLOW).map(|v| v.as_bytes()),
            Some(&b"GET"[..])
        );
    }

    #[test]
    fn every_refusal_is_counted() {
        let metrics = Metrics::new(crate::metrics::Role::Router);
        let refusals = Refusals::default();
        for _ in 0..3 {
            refusals.record(&metrics, Refusal::NotLoopback(DRAIN), NODE);
        }
        refusals.record(&metrics, Refusal::Method(DRAIN), LOOPBACK);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"switchyard_admin_refused_total{path="/drain",reason="not_loopback"} 3"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"switchyard_admin_refused_total{path="/drain",reason="method"} 1"#),
            "{text}"
        );
    }
}
