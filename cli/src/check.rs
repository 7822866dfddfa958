//! Offline checks, in the order a cluster makes them: the CRDs' structural schemas (unknown fields,
//! types, bounds; done while reading the file, see `switchyard_crds::strict`), their CEL rules
//! (evaluated client-side), the operator's own validation, and what the sidecars would refuse at
//! start in the configs rendered from the file (`switchyard_sidecar::start_checks`). `switchyard up`
//! runs the same checks before it starts anything. Then warnings that fail nothing: subscriptions
//! that would match nothing, and why (`unmatched`).

use crate::up::config as render;
use kube::ResourceExt;
use std::collections::BTreeMap;
use switchyard_crds::yaml::Objects;
use switchyard_crds::{Manager, Router};
use switchyard_operator::validate;
use switchyard_operator::validate::template::TemplatePolicy;
use switchyard_protocol::durable::JetStreamConfig;
use switchyard_sidecar::start_checks;

/// Where a field of an object is in the file: (kind, name, field path) to its line.
pub type Place<'a> = &'a dyn Fn(&str, &str, &str) -> Option<usize>;

/// Every problem the API server, the operator or a sidecar would report, one line each, naming the
/// object and field, and the line of the field where `place` finds it.
pub fn problems_placed(objs: &Objects, place: Place<'_>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut push = |kind: &str, name: &str, field: Option<&str>, text: String| {
        let at = field
            .and_then(|f| place(kind, name, f))
            .map(|l| format!(", line {l}"))
            .unwrap_or_default();
        problems.push(format!("{kind} {name}{at}: {text}"));
    };
    for r in &objs.routers {
        let name = r.name_any();
        if let Err(e) = kube::core::cel::validate_cel(r) {
            let field = e.as_slice().first().map(|v| v.field_path.clone());
            push("Router", &name, field.as_deref(), e.to_string());
        }
        let errors = validate::router::validate(&name, &r.spec);
        for e in &errors {
            push("Router", &name, Some(&e.field), e.to_string());
        }
        // The operator would not render a config for an invalid spec.
        if errors.is_empty()
            && let Some((field, p)) = router_start_problem(r, &objs.managers)
        {
            push("Router", &name, field.as_deref(), p);
        }
    }
    for m in &objs.managers {
        let name = m.name_any();
        if let Err(e) = kube::core::cel::validate_cel(m) {
            let field = e.as_slice().first().map(|v| v.field_path.clone());
            push("Manager", &name, field.as_deref(), e.to_string());
        }
        // A file has no namespace whose label could allow an escalating template: refused, and the
        // message names the label that would allow it in a cluster.
        let errors = validate::manager::validate(&name, &m.spec, TemplatePolicy::Restricted);
        for e in &errors {
            push("Manager", &name, Some(&e.field), e.to_string());
        }
        if errors.is_empty()
            && let Some((field, p)) = manager_start_problem(m, &objs.routers)
        {
            push("Manager", &name, field.as_deref(), p);
        }
        if !objs
            .routers
            .iter()
            .any(|r| r.name_any() == m.spec.router_ref.name)
        {
            push(
                "Manager",
                &name,
                Some("spec.routerRef.name"),
                format!(
                    "spec.routerRef.name: Router {:?} is not in this file",
                    m.spec.router_ref.name
                ),
            );
        }
    }
    problems
}

/// Where the sidecar says why it refuses a config at start; the field and message are its own.
const SIDECAR_REFUSES: &str = "(the sidecar refuses this config at start)";

/// What the router sidecar would refuse in the config rendered for `router`: the field, when
/// one is at fault, and the problem.
pub(crate) fn router_start_problem(
    router: &Router,
    managers: &[Manager],
) -> Option<(Option<String>, String)> {
    let mine: Vec<Manager> = managers
        .iter()
        .filter(|m| m.spec.router_ref.name == router.name_any())
        .cloned()
        .collect();
    match render::router_config(router, &mine, &BTreeMap::new()) {
        Err(e) => Some((None, format!("cannot render its sidecar config: {e:#}"))),
        Ok(config) => start_checks::router(&config)
            .err()
            .map(|p| (Some(p.field.clone()), format!("{p} {SIDECAR_REFUSES}"))),
    }
}

/// What the manager sidecar would refuse in the config rendered for `manager`, as for
/// [`router_start_problem`]. Its fields are named as in the spec (the config holds `events`, `app`
/// and `workers` as the spec has them).
pub(crate) fn manager_start_problem(
    manager: &Manager,
    routers: &[Router],
) -> Option<(Option<String>, String)> {
    // The schema bounds app.port; a durable Manager gets a JetStream server from the operator or `up`.
    let port = u16::try_from(manager.spec.app.port).ok()?;
    let jetstream = JetStreamConfig {
        url: "nats://127.0.0.1:4222".into(),
        replicas: 1,
    };
    let router = routers
        .iter()
        .find(|r| r.name_any() == manager.spec.router_ref.name);
    match render::manager_config(manager, router, port, Some(&jetstream)) {
        Err(e) => Some((None, format!("cannot render its sidecar config: {e:#}"))),
        Ok(config) => start_checks::manager(&config).err().map(|p| {
            (
                Some(format!("spec.{}", p.field)),
                format!("spec.{p} {SIDECAR_REFUSES}"),
            )
        }),
    }
}

/// Prints every problem, each with its line in `text` (the file `objs` were read from); fails
/// when there is one.
pub fn run(objs: &Objects, text: &str) -> anyhow::Result<()> {
    let problems = placed(objs, text);
    for p in &problems {
        println!("{p}");
    }
    let warnings = warnings_placed(objs, text);
    for w in &warnings {
        println!("{w}");
    }
    if problems.is_empty() {
        let warned = match warnings.len() {
            0 => String::new(),
            n => format!(" ({n} warning(s))"),
        };
        println!(
            "ok: {} Router(s), {} Manager(s){warned}",
            objs.routers.len(),
            objs.managers.len()
        );
        Ok(())
    } else {
        anyhow::bail!("{} problem(s) found", problems.len())
    }
}

/// [`problems_placed`] with the lines of `text`, the file `objs` were read from.
pub fn placed(objs: &Objects, text: &str) -> Vec<String> {
    let lines = switchyard_crds::yaml::Lines::of(text);
    problems_placed(objs, &|kind, name, field| {
        lines.as_ref().and_then(|l| l.line(kind, name, field))
    })
}

/// The warnings of [`crate::unmatched`], one line each, naming the Manager, the line of the
/// subscription in `text` and the subscription.
pub fn warnings_placed(objs: &Objects, text: &str) -> Vec<String> {
    let lines = switchyard_crds::yaml::Lines::of(text);
    crate::unmatched::warnings(objs)
        .into_iter()
        .map(|w| {
            let at = lines
                .as_ref()
                .and_then(|l| l.line("Manager", &w.manager, &w.field))
                .map(|l| format!(", line {l}"))
                .unwrap_or_default();
            format!("warning: Manager {}{at}: {}", w.manager, w.text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed_problems_of(fixture: &str) -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/refused")
            .join(fixture);
        let text = std::fs::read_to_string(&path).expect("fixture");
        let objs = switchyard_crds::yaml::parse(&text).expect("typed");
        placed(&objs, &text)
    }

    #[test]
    fn problems_on_typed_objects_name_the_line_of_their_field() {
        let cel = placed_problems_of("cel-rule.yaml");
        assert!(
            cel.iter()
                .any(|p| p.starts_with("Manager handlers, line 38: ")
                    && p.contains("spec.workers.deadLetter")),
            "{cel:?}"
        );
        let operator = placed_problems_of("operator-rule.yaml");
        assert_eq!(
            operator,
            [
                "Manager handlers, line 29: spec.app.port: 9901 is used by the sidecar; reserved ports are [9901, 9902, 7070, 7071]"
            ]
        );
        let template = placed_problems_of("privileged-template.yaml");
        assert_eq!(
            template,
            [
                "Manager handlers, line 40: spec.template.spec.containers[0].securityContext.privileged: a privileged container has every device and capability of the node; remove it, or, where the pods are meant to have it, label the Manager's namespace switchyard.dev/allow-privileged-templates=true"
            ]
        );
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/subscriptions.yaml"),
        )
        .expect("example");
        let objs = switchyard_crds::yaml::parse(&text).expect("typed");
        assert_eq!(
            (placed(&objs, &text), warnings_placed(&objs, &text)),
            (vec![], vec![]),
            "the example's subscriptions each match something"
        );
        let sidecar = placed_problems_of("sidecar-start.yaml");
        assert!(
            sidecar.iter().any(|p| p.starts_with(
                "Router edge, line 21: spec.routes[0].schema: not a valid JSON Schema"
            )),
            "{sidecar:?}"
        );
    }

    #[test]
    fn a_subscription_matching_nothing_is_a_warning_on_its_line() {
        let text = r#"apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {name: edge}
spec:
  listeners: {http: {port: 8080}}
  routes:
    - {event: orders.get, http: {method: GET, path: /orders}}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: audit}
spec:
  routerRef: {name: edge}
  events: [orders.get]
  template: {spec: {containers: [{name: app, image: app}]}}
  subscriptions:
    - event: orders.get
    - event: billing.*
"#;
        let objs = switchyard_crds::yaml::parse(text).expect("typed");
        assert_eq!(placed(&objs, text), Vec::<String>::new());
        let w = warnings_placed(&objs, text);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("warning: Manager audit, line 18: spec.subscriptions[1] (billing.*): covers no event type"),
            "{w:?}"
        );
    }
}
