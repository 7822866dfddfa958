//! How published events reach a Manager, for the Manager as a whole, per event type and per
//! subscription.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How published events reach a Manager.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DeliveryMode {
    /// Over the sidecars' frame connections, held in the receiving pod's memory.
    #[default]
    Direct,
    /// Through a NATS JetStream stream: acknowledged once stored, deleted once the app answered 2xx.
    Durable,
}

impl DeliveryMode {
    /// The default, left out when written (`skip_serializing_if`).
    pub fn is_direct(&self) -> bool {
        *self == DeliveryMode::Direct
    }
}
