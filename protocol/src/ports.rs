//! Ports the sidecar binds inside a pod, fixed so the operator can build Services and probes.

/// Admin endpoints of every sidecar: `/metrics`, `/healthz`, `/readyz`, `/routes` (loopback only).
pub const ADMIN: u16 = 9901;
/// The kubelet's probes (`/healthz`, `/readyz`), on a port of their own so a busy or exposed admin
/// port never decides liveness.
pub const PROBES: u16 = 9902;
/// Manager role: inbound multiplexed frame connections from router sidecars.
pub const MANAGER_INBOUND: u16 = 7070;
/// Manager role: the local API the app uses to publish and request events (localhost only).
pub const MANAGER_LOCAL_API: u16 = 7071;

/// Every port the sidecar owns; an app may not use them.
pub const RESERVED: [u16; 4] = [ADMIN, PROBES, MANAGER_INBOUND, MANAGER_LOCAL_API];
