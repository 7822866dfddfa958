//! Kubernetes Events for condition changes, applied generations and failures.

use crate::context::Context;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType};

/// Publishes one event; a failure to publish is logged, never fails the reconcile.
pub(crate) async fn publish(
    ctx: &Context,
    obj: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, obj).await {
        tracing::warn!(error = %e, reason, "could not publish event");
    }
}

/// Events for what changed between the old and the new status: a new generation applied, and each
/// condition whose status flipped.
pub(crate) async fn on_status_change(
    ctx: &Context,
    obj: &ObjectReference,
    old_generation: Option<i64>,
    new_generation: Option<i64>,
    old: &[Condition],
    new: &[Condition],
    applied: &str,
) {
    if old_generation != new_generation && !applied.is_empty() {
        let note = format!(
            "applied generation {}: {applied}",
            new_generation.unwrap_or(0)
        );
        publish(ctx, obj, EventType::Normal, "Applied", "Apply", note).await;
    }
    for c in new {
        let before = old.iter().find(|o| o.type_ == c.type_);
        if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
            continue;
        }
        // A condition appearing as False for the first time is noise, except Ready.
        if before.is_none() && c.status == "False" && c.type_ != "Ready" {
            continue;
        }
        let warning = (c.type_ == "Degraded" && c.status == "True")
            || (c.type_ == "Ready" && c.reason == "InvalidSpec");
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!("{}={}: {}", c.type_, c.status, c.message);
        publish(ctx, obj, type_, &c.reason, "Reconcile", note).await;
    }
}
