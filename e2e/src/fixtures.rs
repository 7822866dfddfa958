//! Manifests the tests apply.

use std::path::PathBuf;

/// `examples/quickstart.yaml`: Router `edge` (4 routes) and Manager `handlers` (noop, echo).
pub fn quickstart() -> PathBuf {
    crate::repo_root().join("examples/quickstart.yaml")
}

/// A minimal valid Router with one HTTP route.
pub fn router(name: &str) -> String {
    router_routing(name, &["noop"])
}

/// A Router named `name` routing each of `events` from `GET /<event>` on port 8080 (the control
/// plane takes load reports only for event types a Router routes).
pub fn router_routing(name: &str, events: &[&str]) -> String {
    let routes: String = events
        .iter()
        .map(|e| format!("    - event: {e}\n      http: {{method: GET, path: /{e}}}\n"))
        .collect();
    format!(
        r#"apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata:
  name: {name}
spec:
  listeners:
    http:
      port: 8080
  routes:
{routes}"#
    )
}

/// A Manager of the Router `router_ref`. `events` and `extra_spec` are YAML fragments:
/// `events` is a flow sequence such as `[noop, echo]`, `extra_spec` further lines of `spec`
/// indented by two spaces (may be empty).
pub fn manager(name: &str, router_ref: &str, events: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata:
  name: {name}
spec:
  routerRef:
    name: {router_ref}
  events: {events}
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/switchyard-dev/switchyard-example-app:0.1.0
{extra_spec}"#
    )
}
