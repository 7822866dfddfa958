//! The process's open-file limit: raised to its hard limit at start (as Go's runtime does), and
//! the reserve kept below it for everything that is not a client connection.

/// File descriptors kept out of the client-connection cap: the probe and admin ports, connections
/// to managers and the control plane, DNS, files. A tenth of the limit, at least 64, at most 1024.
pub(crate) fn reserve(limit: u64) -> u64 {
    (limit / 10).clamp(64, 1024).min(limit)
}

/// Client connections the limit leaves room for once the reserve is kept.
pub(crate) fn room(limit: u64) -> u64 {
    limit - reserve(limit)
}

/// Raises the soft open-file limit to the hard one and returns the soft limit in force (`None`:
/// unlimited). A failure keeps the old limit, which is what the cap is then derived from.
pub(crate) fn raise() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    if now.current != now.maximum {
        let raised = rustix::process::Rlimit {
            current: now.maximum,
            maximum: now.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => return raised.current,
            Err(e) => {
                tracing::warn!(error = %e, soft = ?now.current, hard = ?now.maximum, "cannot raise the open-file limit");
            }
        }
    }
    now.current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_a_tenth_within_bounds() {
        assert_eq!(reserve(20_000), 1024);
        assert_eq!(room(20_000), 18_976);
        assert_eq!(reserve(1024), 102);
        assert_eq!(reserve(100), 64);
        assert_eq!(room(1_048_576), 1_047_552);
        assert_eq!(room(10), 0);
    }
}
