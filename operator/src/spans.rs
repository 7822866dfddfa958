//! Every span the operator exports (pure): the reconciles of each controller and the autoscaler's
//! decisions. The user guide's span reference (`docs/reference/spans.md`) is written from this list
//! beside the sidecar's, and `e2e/tests/operator_telemetry.rs` checks every span a real operator
//! sends its OTLP receiver against it (`switchyard_protocol::spans::check`).

use switchyard_protocol::spans::{Kind, SpanDoc};

/// What `tracing-opentelemetry` adds to every span: where it was made, on which thread, and how
/// long it was busy and idle.
const BRIDGE: [&str; 8] = [
    "code.file.path",
    "code.module.name",
    "code.line.number",
    "thread.id",
    "thread.name",
    "target",
    "busy_ns",
    "idle_ns",
];

/// A reconcile's own fields: the object's name under `$kind`, its namespace, and on failure the
/// error's metric label.
const fn reconcile(kind: &'static str) -> [&'static str; 11] {
    [
        kind,
        "namespace",
        "error.type",
        BRIDGE[0],
        BRIDGE[1],
        BRIDGE[2],
        BRIDGE[3],
        BRIDGE[4],
        BRIDGE[5],
        BRIDGE[6],
        BRIDGE[7],
    ]
}

const RECONCILE_ROUTER: [&str; 11] = reconcile("router");
const RECONCILE_MANAGER: [&str; 11] = reconcile("manager");

/// Every span, each a root of its own trace.
pub const SPANS: &[SpanDoc] = &[
    SpanDoc {
        name: "reconcile router",
        kind: Kind::Internal,
        role: "operator",
        when: "one reconcile of a Router (status error when it failed)",
        attributes: &RECONCILE_ROUTER,
        events: &[],
    },
    SpanDoc {
        name: "reconcile manager",
        kind: Kind::Internal,
        role: "operator",
        when: "one reconcile of a Manager (status error when it failed)",
        attributes: &RECONCILE_MANAGER,
        events: &[],
    },
    SpanDoc {
        name: "scale manager",
        kind: Kind::Internal,
        role: "operator",
        when: "one autoscaler decision written (status error when the write failed)",
        attributes: &[
            "k8s.namespace.name",
            "switchyard.manager",
            "switchyard.event_types",
            "switchyard.scale.from",
            "switchyard.scale.to",
            "switchyard.scale.direction",
            "switchyard.scale.mode",
            BRIDGE[0],
            BRIDGE[1],
            BRIDGE[2],
            BRIDGE[3],
            BRIDGE[4],
            BRIDGE[5],
            BRIDGE[6],
            BRIDGE[7],
        ],
        events: &[],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::spans::check;

    #[test]
    fn a_reconcile_span_names_its_object_and_the_bridge_fields() {
        let attrs = ["router", "namespace", "busy_ns", "code.line.number"];
        assert!(check(SPANS, "reconcile router", 1, &attrs, &[]).is_ok());
        let e = check(SPANS, "reconcile router", 1, &["manager"], &[]).expect_err("manager");
        assert!(e.to_string().contains("\"manager\" not listed"), "{e}");
        assert!(check(SPANS, "reconcile gateway", 1, &[], &[]).is_err());
    }
}
