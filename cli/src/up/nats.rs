//! The configuration file of the local NATS JetStream server `switchyard up` starts for durable
//! delivery. Pure: the text, from the ports, the store folder and the flush setting.
//!
//! A file rather than flags, because two settings the mesh's promises rest on have no flag:
//! `max_payload` (NATS's default 1 MiB is below the 16 MiB events the mesh carries, and a larger
//! durable publish could never be stored) and `jetstream.sync_interval` (NATS's default flushes the
//! store every 2 minutes, so a 202 was not on disk: Jepsen's analysis of NATS 2.12.1, December 2025,
//! lost acknowledged writes in a power failure with it; `always` flushes before each PubAck).

use anyhow::bail;
use std::net::Ipv4Addr;
use std::path::Path;
use switchyard_protocol::durable::NATS_MAX_PAYLOAD;

/// The flush setting the server gets unless the user chooses another: every write on disk before
/// its PubAck.
pub const SYNC_ALWAYS: &str = "always";

/// `value` checked as a `sync_interval`: `always`, or a duration nats-server reads (`10s`, `2m`).
pub fn sync_interval(value: &str) -> anyhow::Result<String> {
    let v = value.trim();
    if v == SYNC_ALWAYS {
        return Ok(v.to_owned());
    }
    match humantime::parse_duration(v) {
        Ok(d) if !d.is_zero() && d.subsec_nanos() == 0 => Ok(format!("{}s", d.as_secs())),
        _ => bail!(
            "--jetstream-sync {value:?}: give `always` (every write on disk before its acknowledgement, the default) or a whole number of seconds or minutes such as 10s or 2m (the server flushes that often: a power failure loses acknowledged events of that interval)"
        ),
    }
}

/// The server's configuration: clients and monitoring on `host`'s `port` and `monitor`, the store
/// in `store`, flushed per `sync` (checked by [`sync_interval`]).
pub fn conf(host: Ipv4Addr, port: u16, monitor: u16, store: &Path, sync: &str) -> String {
    format!(
        "# Written by `switchyard up`; rewritten at every start.\n\
         listen: \"{host}:{port}\"\n\
         http: \"{host}:{monitor}\"\n\
         # The largest event the mesh carries (16 MiB) with its headers.\n\
         max_payload: {NATS_MAX_PAYLOAD}\n\
         jetstream {{\n  store_dir: {store:?}\n  sync_interval: {sync}\n}}\n",
        store = store.display().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_takes_the_largest_event_and_flushes_before_every_ack() {
        let c = conf(
            Ipv4Addr::LOCALHOST,
            4222,
            8222,
            Path::new("/tmp/state/jetstream"),
            SYNC_ALWAYS,
        );
        assert!(c.contains("listen: \"127.0.0.1:4222\""), "{c}");
        assert!(c.contains("http: \"127.0.0.1:8222\""), "{c}");
        assert!(c.contains("max_payload: 16842752\n"), "{c}");
        assert!(c.contains("store_dir: \"/tmp/state/jetstream\""), "{c}");
        assert!(c.contains("sync_interval: always\n"), "{c}");
    }

    #[test]
    fn a_flush_interval_is_always_or_whole_seconds() {
        assert_eq!(sync_interval("always").ok().as_deref(), Some("always"));
        assert_eq!(sync_interval("2m").ok().as_deref(), Some("120s"));
        assert_eq!(sync_interval(" 10s ").ok().as_deref(), Some("10s"));
        for bad in ["", "0s", "1.5s", "never", "sometimes"] {
            let e = sync_interval(bad).err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains("--jetstream-sync")),
                "{bad}: {e:?}"
            );
        }
    }
}
