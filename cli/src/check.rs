//! Offline checks: the CRDs' CEL rules (evaluated client-side) and the operator's own validation.

use kube::ResourceExt;
use switchyard_crds::yaml::Objects;
use switchyard_operator::validate;

/// Every problem the API server or the operator would report, one line each, naming the object and field.
pub fn problems(objs: &Objects) -> Vec<String> {
    let mut problems = Vec::new();
    for r in &objs.routers {
        let name = r.name_any();
        if let Err(e) = kube::core::cel::validate_cel(r) {
            problems.push(format!("Router {name}: {e}"));
        }
        problems.extend(
            validate::router::validate(&name, &r.spec)
                .iter()
                .map(|e| format!("Router {name}: {e}")),
        );
    }
    for m in &objs.managers {
        let name = m.name_any();
        if let Err(e) = kube::core::cel::validate_cel(m) {
            problems.push(format!("Manager {name}: {e}"));
        }
        problems.extend(
            validate::manager::validate(&name, &m.spec)
                .iter()
                .map(|e| format!("Manager {name}: {e}")),
        );
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
