//! Environment variables the operator, `switchyard up` and the sidecars agree on. One list, so a
//! rename cannot leave one side reading a name the other no longer sets.

/// The operator's control-plane URL, set on every sidecar (router: `--control-plane`).
pub const CONTROL_PLANE: &str = "SWITCHYARD_CONTROL_PLANE";
/// The event types one manager pod handles (a per-event-type Deployment's), comma-separated.
pub const EVENT_TYPES: &str = "SWITCHYARD_EVENT_TYPES";
/// The manager sidecar's local API URL, given to the app.
pub const LOCAL_API: &str = "SWITCHYARD_LOCAL_API";
/// Path of the Unix domain socket the app listens on when the Manager's `app.transport` is `unix`;
/// set on the app and on the manager sidecar, which connects there.
pub const APP_SOCKET: &str = "SWITCHYARD_APP_SOCKET";
/// How long a manager sidecar drained by its preStop hook waits for the SIGTERM that follows
/// (a duration, e.g. `60s`); the operator sets it above the pod's termination grace period.
pub const SIGNAL_WAIT: &str = "SWITCHYARD_SIGNAL_WAIT";
/// Threads of a sidecar's async runtime (default 1).
pub const RUNTIME_THREADS: &str = "SWITCHYARD_RUNTIME_THREADS";
/// The pod's name (downward API); sidecars name themselves with it to the control plane.
pub const POD_NAME: &str = "POD_NAME";
/// The pod's namespace (downward API).
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
/// URL of the Identity service that certifies this sidecar (`https://...`: the operator's control
/// plane, or `switchyard up`'s own). Set: every internal hop is mTLS. Unset: plain TCP (a warning
/// says so).
pub const IDENTITY: &str = "SWITCHYARD_IDENTITY";
/// File holding the token the sidecar proves itself with (default: the projected ServiceAccount
/// token the operator mounts, `/var/run/secrets/switchyard/token`); read again at every renewal.
pub const IDENTITY_TOKEN_FILE: &str = "SWITCHYARD_IDENTITY_TOKEN_FILE";
/// File holding the mesh's trust bundle, PEM (default `/etc/switchyard/ca.crt`, from the config map).
pub const IDENTITY_TRUST_FILE: &str = "SWITCHYARD_IDENTITY_TRUST_FILE";
/// How often the sidecar asks the Identity service what the mesh trusts now (a duration, e.g. `10s`,
/// the default): a rotated bundle or issuer reaches it within this, with no restart.
pub const IDENTITY_TRUST_POLL: &str = "SWITCHYARD_IDENTITY_TRUST_POLL";
