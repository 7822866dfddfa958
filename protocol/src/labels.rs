//! Label and annotation keys on the objects the operator makes, which the control plane, the CLI and
//! the tests select by.

/// Label: who manages the object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label: the custom resource a child belongs to.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// Label: the component (`switchyard-router` or `switchyard-manager`).
pub const NAME: &str = "app.kubernetes.io/name";
/// Label: the Router of a router pod.
pub const ROUTER: &str = "switchyard.dev/router";
/// Label: the Manager of a manager pod.
pub const MANAGER: &str = "switchyard.dev/manager";
/// Label: the event type a per-event-type Deployment serves.
pub const EVENT_TYPE: &str = "switchyard.dev/event-type";
/// Pod annotation: hash of the rendered config, so a config change rolls the pods.
pub const CONFIG_HASH: &str = "switchyard.dev/config-hash";
