//! Offline checks, in the order a cluster makes them: the CRDs' structural schemas (unknown fields,
//! types, bounds; done while reading the file, see `switchyard_crds::strict`), their CEL rules
//! (evaluated client-side), the operator's own validation, and what the sidecars would refuse at
//! start in the configs rendered from the file (`switchyard_sidecar::start_checks`). `switchyard up`
//! runs the same checks before it starts anything.

use crate::up::config as render;
use kube::ResourceExt;
use std::collections::BTreeMap;
use switchyard_crds::yaml::Objects;
use switchyard_crds::{Manager, Router};
use switchyard_operator::validate;
use switchyard_protocol::durable::JetStreamConfig;
use switchyard_sidecar::start_checks;

/// Every problem the API server or the operator would report, one line each, naming the object and field.
pub fn problems(objs: &Objects) -> Vec<String> {
    let mut problems = Vec::new();
    for r in &objs.routers {
        let name = r.name_any();
        if let Err(e) = kube::core::cel::validate_cel(r) {
            problems.push(format!("Router {name}: {e}"));
        }
        let errors = validate::router::validate(&name, &r.spec);
        problems.extend(errors.iter().map(|e| format!("Router {name}: {e}")));
        // The operator would not render a config for an invalid spec.
        if errors.is_empty()
            && let Some(p) = router_start_problem(r, &objs.managers)
        {
            problems.push(format!("Router {name}: {p}"));
        }
    }
    for m in &objs.managers {
        let name = m.name_any();
        if let Err(e) = kube::core::cel::validate_cel(m) {
            problems.push(format!("Manager {name}: {e}"));
        }
        let errors = validate::manager::validate(&name, &m.spec);
        problems.extend(errors.iter().map(|e| format!("Manager {name}: {e}")));
        if errors.is_empty()
            && let Some(p) = manager_start_problem(m, &objs.routers)
        {
            problems.push(format!("Manager {name}: {p}"));
        }
        if !objs
            .routers
            .iter()
            .any(|r| r.name_any() == m.spec.router_ref.name)
        {
            problems.push(format!(
                "Manager {name}: spec.routerRef.name: Router {:?} is not in this file",
                m.spec.router_ref.name
            ));
        }
    }
    problems
}

/// Where the sidecar says why it refuses a config at start; the field and message are its own.
const SIDECAR_REFUSES: &str = "(the sidecar refuses this config at start)";

/// What the router sidecar would refuse in the config rendered for `router`.
pub(crate) fn router_start_problem(router: &Router, managers: &[Manager]) -> Option<String> {
    let mine: Vec<Manager> = managers
        .iter()
        .filter(|m| m.spec.router_ref.name == router.name_any())
        .cloned()
        .collect();
    match render::router_config(router, &mine, &BTreeMap::new()) {
        Err(e) => Some(format!("cannot render its sidecar config: {e:#}")),
        Ok(config) => start_checks::router(&config)
            .err()
            .map(|p| format!("{p} {SIDECAR_REFUSES}")),
    }
}

/// What the manager sidecar would refuse in the config rendered for `manager`. Its fields are named
/// as in the spec (the config holds `events`, `app` and `workers` as the spec has them).
pub(crate) fn manager_start_problem(manager: &Manager, routers: &[Router]) -> Option<String> {
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
        Err(e) => Some(format!("cannot render its sidecar config: {e:#}")),
        Ok(config) => start_checks::manager(&config)
            .err()
            .map(|p| format!("spec.{p} {SIDECAR_REFUSES}")),
    }
}

/// Prints every problem; fails when there is one.
pub fn run(objs: &Objects) -> anyhow::Result<()> {
    let problems = problems(objs);
    for p in &problems {
        println!("{p}");
    }
    if problems.is_empty() {
        println!(
            "ok: {} Router(s), {} Manager(s)",
            objs.routers.len(),
            objs.managers.len()
        );
        Ok(())
    } else {
        anyhow::bail!("{} problem(s) found", problems.len())
    }
}
