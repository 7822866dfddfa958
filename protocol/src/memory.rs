//! Byte budgets derived from a container's memory limit: how many bytes of events a manager sidecar
//! admits, how many bytes of bodies its local API and a router sidecar hold. Pure: the sidecars read
//! the limit from their cgroup and pass it in; the operator passes the limit it renders
//! (`spec.sidecar.resources` of a Manager, `spec.resources` of a Router) to say in the status what a
//! sidecar would refuse at start.
//!
//! The split, for a limit `L`: [`PROCESS_BYTES`] are kept for the process itself (runtime, TLS,
//! connections' buffers, metrics, the allocator's slack). Of the rest, a router gives half to the
//! request bodies it holds (`broker.bodyBudgetBytes`, lowered to it when set higher); a manager half
//! to the events it admits and a quarter to its local API's bodies (1 MiB each at most). What is
//! left is headroom for the bytes that travel with the counted ones and are not counted one by one:
//! the frame being read on each connection, an event's copy on its way to the app, the app's answer
//! read back.

/// What the process needs besides the bytes it counts. Measured (`sidecar/tests/memory_limit.rs`):
/// a manager sidecar's cgroup holds about 3 MiB when it is ready, and 61-73 MiB at the peak of a
/// flood of 1 MiB events under 128 MiB, with 48 MiB of them admitted; the rest is headroom for
/// TLS sessions and many connections.
pub const PROCESS_BYTES: u64 = 32 << 20;

/// The limit the budgets are computed for when the container has none (cgroup v2 `max`, cgroup v1's
/// huge number, or no cgroup at all, as for `switchyard up`): 1 GiB.
pub const NO_LIMIT_ASSUMED: u64 = 1 << 30;

/// A cgroup limit at or above this is no limit (cgroup v1 says "none" with 2^63 rounded down to a page).
pub const UNLIMITED_FROM: u64 = 1 << 60;

/// Bytes an admitted event costs besides its payload: its head's strings and headers, its task and
/// its place in the queues.
pub const EVENT_OVERHEAD: u64 = 4 << 10;

/// The memory limit to compute for: `None` or a huge limit is [`NO_LIMIT_ASSUMED`].
pub fn effective_limit(limit: Option<u64>) -> u64 {
    match limit {
        Some(l) if l < UNLIMITED_FROM => l,
        _ => NO_LIMIT_ASSUMED,
    }
}

/// What is left after [`PROCESS_BYTES`].
fn usable(limit: u64) -> u64 {
    limit.saturating_sub(PROCESS_BYTES)
}

/// A manager sidecar's queue settings and the largest event it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManagerLoad {
    /// The largest event it admits, in bytes (the largest frame the mesh carries).
    pub largest_event: u64,
    /// `workers.queueCapacity + workers.maxInFlight`: the events it admits at once.
    pub admitted_events: u64,
    /// The largest body its local API reads whole.
    pub local_api_body: u64,
}

/// A manager sidecar's byte budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManagerBudgets {
    /// The limit they were computed for (after [`effective_limit`]).
    pub limit: u64,
    /// Bytes of admitted events (payloads plus [`EVENT_OVERHEAD`] each) held at once.
    pub admitted: u64,
    /// Bytes of request bodies its local API holds at once.
    pub local_api: u64,
}

/// Why a limit cannot hold what the settings ask; `Display` names the settings and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misfit {
    /// The limit computed for.
    pub limit: u64,
    /// The budget it leaves.
    pub budget: u64,
    /// The least the budget must hold.
    pub needed: u64,
    /// The smallest limit that fits.
    pub least_limit: u64,
    /// What the budget is for and which settings ask for `needed`.
    pub what: &'static str,
    /// The setting that sets the limit.
    pub limit_field: &'static str,
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the memory limit of {} ({}) leaves {} for {}, less than the {} it must hold; set {} to at least {}",
            mib(self.limit),
            self.limit_field,
            mib(self.budget),
            self.what,
            mib(self.needed),
            self.limit_field,
            mib(self.least_limit),
        )
    }
}

impl std::error::Error for Misfit {}

/// Bytes as MiB with one decimal (`16.0 MiB`), for messages.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The smallest limit whose budget (`usable / divisor`) holds `needed`.
fn least_limit(needed: u64, divisor: u64) -> u64 {
    needed.saturating_mul(divisor).saturating_add(PROCESS_BYTES)
}

/// A manager sidecar's budgets under `limit` (the container's memory limit, `None`: none): half of
/// what is left after [`PROCESS_BYTES`] for admitted events (never more than its event bound of the
/// largest size), a quarter for its local API's bodies. Refused when the events' half cannot hold
/// one event of the largest size (no such event could ever be admitted) or the quarter one local
/// API body.
pub fn manager_budgets(limit: Option<u64>, load: ManagerLoad) -> Result<ManagerBudgets, Misfit> {
    let limit = effective_limit(limit);
    let field = "spec.sidecar.resources.limits.memory";
    let largest = load.largest_event.saturating_add(EVENT_OVERHEAD);
    let half = usable(limit) / 2;
    if half < largest {
        return Err(Misfit {
            limit,
            budget: half,
            needed: largest,
            least_limit: least_limit(largest, 2),
            what: "admitted events (half of what is left after 32 MiB for the process)",
            limit_field: field,
        });
    }
    let quarter = usable(limit) / 4;
    if quarter < load.local_api_body {
        return Err(Misfit {
            limit,
            budget: quarter,
            needed: load.local_api_body,
            least_limit: least_limit(load.local_api_body, 4),
            what: "the local API's bodies (a quarter of what is left after 32 MiB for the process)",
            limit_field: field,
        });
    }
    let bound = largest.saturating_mul(load.admitted_events.max(1));
    Ok(ManagerBudgets {
        limit,
        admitted: half.min(bound),
        local_api: quarter,
    })
}

/// A router sidecar's body budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterBudget {
    /// The limit it was computed for (after [`effective_limit`]).
    pub limit: u64,
    /// Bytes of request bodies held at once.
    pub bodies: u64,
    /// `broker.bodyBudgetBytes` was over what the limit allows and was lowered to `bodies`.
    pub lowered: bool,
}

/// A router sidecar's body budget under `limit`: `configured` (`broker.bodyBudgetBytes`), at most
/// half of what is left after [`PROCESS_BYTES`] (the other half carries the answers coming back and
/// the connections' buffers). Refused when that cannot hold one body of the largest size read whole.
pub fn router_budget(
    limit: Option<u64>,
    configured: u64,
    largest_body: u64,
) -> Result<RouterBudget, Misfit> {
    let limit = effective_limit(limit);
    let half = usable(limit) / 2;
    let bodies = configured.min(half);
    if half < largest_body {
        return Err(Misfit {
            limit,
            budget: half,
            needed: largest_body,
            least_limit: least_limit(largest_body, 2),
            what: "request bodies (half of what is left after 32 MiB for the process), one body of the largest size read whole (bodyLimit.maxBytes, at most 16 MiB)",
            limit_field: "spec.resources.limits.memory",
        });
    }
    Ok(RouterBudget {
        limit,
        bodies,
        lowered: bodies < configured,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn load() -> ManagerLoad {
        ManagerLoad {
            largest_event: 16 * MIB + 2048,
            admitted_events: 1088,
            local_api_body: MIB,
        }
    }

    #[test]
    fn no_limit_and_a_huge_one_are_the_documented_default() {
        assert_eq!(effective_limit(None), NO_LIMIT_ASSUMED);
        // cgroup v1's "no limit".
        assert_eq!(
            effective_limit(Some(9_223_372_036_854_771_712)),
            NO_LIMIT_ASSUMED
        );
        assert_eq!(effective_limit(Some(128 * MIB)), 128 * MIB);
        let b = manager_budgets(None, load()).expect("fits");
        assert_eq!(b.admitted, (NO_LIMIT_ASSUMED - PROCESS_BYTES) / 2);
    }

    #[test]
    fn a_manager_under_128_mib_admits_48_mib_and_its_local_api_holds_24() {
        let b = manager_budgets(Some(128 * MIB), load()).expect("fits");
        assert_eq!(
            (b.limit, b.admitted, b.local_api),
            (128 * MIB, 48 * MIB, 24 * MIB)
        );
        // Counted with their overhead, 1 MiB events fit 47 at once: below the event bound.
        assert_eq!(b.admitted / (MIB + EVENT_OVERHEAD), 47);
    }

    #[test]
    fn the_event_bound_caps_the_byte_budget() {
        let small = ManagerLoad {
            largest_event: MIB,
            admitted_events: 4,
            local_api_body: MIB,
        };
        let b = manager_budgets(Some(1024 * MIB), small).expect("fits");
        assert_eq!(b.admitted, 4 * (MIB + EVENT_OVERHEAD));
    }

    #[test]
    fn a_limit_that_cannot_hold_one_largest_event_is_refused_naming_the_field_and_the_fix() {
        let e =
            manager_budgets(Some(64 * MIB), load()).expect_err("16 MiB half, 16 MiB + 6 KiB event");
        assert_eq!(e.budget, 16 * MIB);
        assert_eq!(e.needed, 16 * MIB + 2048 + EVENT_OVERHEAD);
        let text = e.to_string();
        assert!(
            text.contains("spec.sidecar.resources.limits.memory"),
            "{text}"
        );
        assert!(text.starts_with("the memory limit of 64.0 MiB"), "{text}");
        // The limit it names fits, and one byte less does not.
        assert!(manager_budgets(Some(e.least_limit), load()).is_ok());
        assert!(manager_budgets(Some(e.least_limit - 1), load()).is_err());
    }

    #[test]
    fn a_router_budget_is_lowered_to_half_of_what_its_limit_leaves() {
        let b = router_budget(Some(256 * MIB), 256 * MIB, MIB).expect("fits");
        assert_eq!((b.bodies, b.lowered), (112 * MIB, true));
        let b = router_budget(Some(256 * MIB), 64 * MIB, MIB).expect("fits");
        assert_eq!((b.bodies, b.lowered), (64 * MIB, false));
        let b = router_budget(None, 256 * MIB, 16 * MIB).expect("fits");
        assert_eq!((b.bodies, b.lowered), (256 * MIB, false));
    }

    #[test]
    fn a_router_limit_that_cannot_hold_its_largest_body_is_refused() {
        let e = router_budget(Some(48 * MIB), 256 * MIB, 16 * MIB).expect_err("8 MiB < 16 MiB");
        assert_eq!(e.budget, 8 * MIB);
        assert!(
            e.to_string().contains("spec.resources.limits.memory"),
            "{e}"
        );
        assert!(router_budget(Some(e.least_limit), 256 * MIB, 16 * MIB).is_ok());
    }
}
