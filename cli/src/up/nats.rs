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
use std::path::{Path, PathBuf};
use switchyard_protocol::durable::NATS_MAX_PAYLOAD;
use switchyard_protocol::nats_access::{self, Permissions};

/// Who may connect and what each may do, when the mesh's mTLS is on: the server's certificate from
/// the run's CA, client certificates required and verified against it, each mapped by its SPIFFE
/// URI to a user with that Manager's permissions (`switchyard_protocol::nats_access`). A client
/// without a certificate, or whose identity has no user, is refused.
pub struct Access {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The mesh's trust bundle (PEM).
    pub ca: PathBuf,
    /// Each Manager's identity (SPIFFE URI) and permissions.
    pub users: Vec<(String, Permissions)>,
}

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
/// in `store`, flushed per `sync` (checked by [`sync_interval`]); with `access`, clients only over
/// mutual TLS, each with its Manager's permissions (monitoring stays on loopback, plain).
pub fn conf(
    host: Ipv4Addr,
    port: u16,
    monitor: u16,
    store: &Path,
    sync: &str,
    access: Option<&Access>,
) -> String {
    let mut conf = format!(
        "# Written by `switchyard up`; rewritten at every start.\n\
         listen: \"{host}:{port}\"\n\
         http: \"{host}:{monitor}\"\n\
         # The largest event the mesh carries (16 MiB) with its headers.\n\
         max_payload: {NATS_MAX_PAYLOAD}\n\
         jetstream {{\n  store_dir: {store:?}\n  sync_interval: {sync}\n}}\n",
        store = store.display().to_string(),
    );
    if let Some(a) = access {
        conf.push_str(&format!(
            "# Mutual TLS with the run's mesh CA; each client certificate's SPIFFE URI is its user.\n\
             tls {{\n  cert_file: {cert:?}\n  key_file: {key:?}\n  ca_file: {ca:?}\n  verify_and_map: true\n  timeout: 2\n}}\n",
            cert = a.cert.display().to_string(),
            key = a.key.display().to_string(),
            ca = a.ca.display().to_string(),
        ));
        conf.push_str(&nats_access::authorization_block(&a.users));
    }
    conf
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
            None,
        );
        assert!(c.contains("listen: \"127.0.0.1:4222\""), "{c}");
        assert!(c.contains("http: \"127.0.0.1:8222\""), "{c}");
        assert!(c.contains("max_payload: 16842752\n"), "{c}");
        assert!(c.contains("store_dir: \"/tmp/state/jetstream\""), "{c}");
        assert!(c.contains("sync_interval: always\n"), "{c}");
        assert!(!c.contains("tls"), "{c}");
    }

    #[test]
    fn with_the_mesh_every_client_shows_a_certificate_mapped_to_its_user() {
        let access = Access {
            cert: "/s/identity/nats.crt".into(),
            key: "/s/identity/nats.key".into(),
            ca: "/s/identity/ca.crt".into(),
            users: vec![(
                "spiffe://local.switchyard/ns/default/manager/orders".into(),
                Permissions {
                    publish: vec!["sy.default.orders.a.*".into()],
                    subscribe: vec!["_SY_INBOX.default.orders.>".into()],
                },
            )],
        };
        let c = conf(
            Ipv4Addr::LOCALHOST,
            4222,
            8222,
            Path::new("/s/jetstream"),
            SYNC_ALWAYS,
            Some(&access),
        );
        assert!(c.contains("cert_file: \"/s/identity/nats.crt\""), "{c}");
        assert!(c.contains("ca_file: \"/s/identity/ca.crt\""), "{c}");
        assert!(c.contains("verify_and_map: true"), "{c}");
        assert!(
            c.contains("\"user\": \"spiffe://local.switchyard/ns/default/manager/orders\""),
            "{c}"
        );
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
