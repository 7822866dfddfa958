//! Command-line settings of the operator, validated once at start-up.

use crate::scope::Scope;
use clap::{Parser, ValueEnum};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, for log pipelines.
    Json,
    /// Human-readable lines.
    Text,
}

/// The Switchyard operator.
#[derive(Parser, Clone, Debug)]
#[command(name = "switchyard-operator", version, about)]
pub struct Settings {
    /// Address of /metrics (and /healthz, /readyz, kept for scrapers that read them there).
    #[arg(long, env = "SWITCHYARD_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of the probes, /healthz and /readyz, on a listener of their own: clients holding
    /// every admin connection cannot fail the kubelet's probes.
    #[arg(long, env = "SWITCHYARD_PROBE_ADDR", default_value = "0.0.0.0:8081")]
    pub probe_addr: SocketAddr,
    /// Address of the control-plane gRPC server (routing tables, load reports); every replica serves it.
    #[arg(
        long,
        env = "SWITCHYARD_CONTROL_PLANE_ADDR",
        default_value = "0.0.0.0:7443"
    )]
    pub control_plane_addr: SocketAddr,
    /// Address of the Identity service (`Certify`) with mesh TLS: the one port where a client
    /// without a mesh certificate may connect; the control plane's requires one.
    #[arg(long, env = "SWITCHYARD_IDENTITY_ADDR", default_value = "0.0.0.0:7444")]
    pub identity_addr: SocketAddr,
    /// URL at which sidecars reach the Identity service; unset: the control-plane URL's host with
    /// the port of `--identity-addr`.
    #[arg(long, env = "SWITCHYARD_IDENTITY_URL")]
    pub identity_url: Option<String>,
    /// URL at which sidecars reach the control plane (the chart sets
    /// `https://<release service>.<namespace>.svc:<port>`; `http://` with `--mesh-tls=false`).
    /// Unset: sidecars get no control plane and find Manager pods by DNS of their Services.
    #[arg(long, env = "SWITCHYARD_CONTROL_PLANE_URL")]
    pub control_plane_url: Option<String>,
    /// Image of the sidecar the operator injects into Router and Manager pods.
    #[arg(
        long,
        env = "SWITCHYARD_SIDECAR_IMAGE",
        default_value = "ghcr.io/switchyard-dev/switchyard-sidecar:0.1.0"
    )]
    pub sidecar_image: String,
    /// How many Router and Manager Deployments may change their sidecar image at once (after an
    /// operator upgrade changes it); the others keep the image they run until their turn.
    #[arg(
        long,
        env = "SWITCHYARD_SIDECAR_ROLLOUTS_AT_ONCE",
        default_value_t = crate::controller::sidecar_rollout::DEFAULT_ROLLOUTS_AT_ONCE,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub sidecar_rollouts_at_once: u16,
    /// Log filter, e.g. `info` or `info,kube=debug`.
    #[arg(long, env = "SWITCHYARD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "SWITCHYARD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Run controllers only while holding the Lease, so several replicas are safe.
    #[arg(long, env = "SWITCHYARD_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "SWITCHYARD_LEASE_NAME",
        default_value = "switchyard-operator"
    )]
    pub lease_name: String,
    /// Namespace of the leader-election Lease (the operator's own namespace in a pod).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Identity in the Lease (the pod name in a cluster); defaults to host name and process id.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Mesh TLS: the operator runs the mesh CA and the Identity service, the control plane is TLS
    /// only, and sidecars get a certificate each and talk mTLS on every internal hop. `false` runs
    /// the mesh on plain TCP (and the control plane on h2c), as before identity existed.
    #[arg(long, env = "SWITCHYARD_MESH_TLS", default_value_t = true, action = clap::ArgAction::Set)]
    pub mesh_tls: bool,
    /// Trust domain of the mesh identities, `spiffe://<trust domain>/ns/<namespace>/<kind>/<name>`.
    #[arg(long, env = "SWITCHYARD_TRUST_DOMAIN", default_value = switchyard_identity::DEFAULT_TRUST_DOMAIN)]
    pub trust_domain: String,
    /// A Secret in the operator's namespace holding the mesh CA (`tls.crt`, `tls.key`, and `ca.crt`
    /// when the CA is an intermediate), e.g. one cert-manager keeps. Unset: the operator makes
    /// `switchyard-ca` on first start and keeps using it.
    #[arg(long, env = "SWITCHYARD_CA_SECRET")]
    pub ca_secret: Option<String>,
    /// Lifetime of the certificates issued to sidecars (renewed at two thirds), e.g. `24h`.
    #[arg(long, env = "SWITCHYARD_CERT_LIFETIME", default_value = "24h", value_parser = lifetime)]
    pub cert_lifetime: Duration,
    /// How long a new issuer in the CA Secret is announced to the sidecars (which poll the trust
    /// every few seconds) before it signs; the previous issuer signs meanwhile. 0s: at once.
    #[arg(long, env = "SWITCHYARD_ISSUER_ACTIVATION_DELAY", default_value = "30s", value_parser = activation_delay)]
    pub issuer_activation_delay: Duration,
    /// URL at which the other replicas reach this one's control plane. The leader writes it into
    /// the Lease, and standbys forward load reports and activations there (over mesh TLS, with the
    /// operator's certificate, when it is on). Unset: `https://<POD_IP>:<control-plane port>`, or
    /// `https://<--control-plane-addr>` when that names a host (`http://` with `--mesh-tls=false`).
    #[arg(long, env = "SWITCHYARD_PEER_URL")]
    pub peer_url: Option<String>,
    /// This pod's IP (the chart sets it from the downward API), for the default `--peer-url`.
    #[arg(long, env = "POD_IP")]
    pub pod_ip: Option<IpAddr>,
    /// Namespaces to watch and write in, comma-separated (`team-a,team-b`): every watch, list and
    /// write is namespaced, so namespaced Roles are enough, and Routers and Managers elsewhere are
    /// ignored. Empty: every namespace (cluster-wide rights).
    #[arg(
        long,
        env = "SWITCHYARD_WATCH_NAMESPACES",
        default_value = "",
        value_parser = Scope::parse
    )]
    pub watch_namespaces: Scope,
    /// NATS URL(s) of the JetStream servers, comma-separated (`nats://a:4222,nats://b:4222`): given
    /// to the sidecars of durable Managers (and of Managers publishing to durable types), and read
    /// by the leader for each durable Manager's backlog, which its autoscaler counts as queued.
    /// Unset: durable delivery has no servers in this cluster.
    #[arg(long, env = "SWITCHYARD_JETSTREAM_URL", value_parser = jetstream_url)]
    pub jetstream_url: Option<String>,
    /// With mesh TLS, the Secret (in the operator's namespace) the leader keeps for the chart's
    /// JetStream servers: their certificate from the mesh CA, the trust bundle, and one NATS user
    /// per Manager with its table's permissions (`nats_access`). Unset: the servers are the
    /// user's own (`jetstream.url`), who keeps their TLS and users.
    #[arg(long, env = "SWITCHYARD_JETSTREAM_ACCESS_SECRET")]
    pub jetstream_access_secret: Option<String>,
    /// The DNS names the chart's JetStream servers route to each other by (comma-separated): their
    /// certificate names them too, since a server checks the name of the peer it dials.
    #[arg(
        long,
        env = "SWITCHYARD_JETSTREAM_SERVER_NAMES",
        value_delimiter = ',',
        value_parser = dns_name,
        requires = "jetstream_access_secret"
    )]
    pub jetstream_server_names: Vec<String>,
    /// Accept a `nats://` (plaintext) JetStream URL while the mesh runs mutual TLS: every pod that
    /// reaches the servers can then read, publish and delete every namespace's durable events.
    /// Off: such a URL is refused at start.
    #[arg(long, env = "SWITCHYARD_JETSTREAM_INSECURE", default_value_t = false)]
    pub jetstream_insecure: bool,
    /// Replicas of each stream the sidecars create (3 on the chart's 3-node cluster).
    #[arg(long, env = "SWITCHYARD_JETSTREAM_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub jetstream_replicas: u8,
    /// How often the leader reads each durable Manager's backlog from JetStream, e.g. `2s`.
    #[arg(long, env = "SWITCHYARD_BACKLOG_INTERVAL", default_value = "2s", value_parser = backlog_duration)]
    pub backlog_interval: Duration,
    /// How long one Manager's backlog read may take before it counts as failed, e.g. `1s`.
    #[arg(long, env = "SWITCHYARD_BACKLOG_TIMEOUT", default_value = "1s", value_parser = backlog_duration)]
    pub backlog_timeout: Duration,
}

/// Checks a NATS URL list: each entry `nats://host[:port]` (or `tls://`), none empty.
fn jetstream_url(text: &str) -> Result<String, String> {
    let urls: Vec<&str> = text.split(',').map(str::trim).collect();
    for u in &urls {
        let Some((scheme, rest)) = u.split_once("://") else {
            return Err(format!(
                "{u:?} is not a NATS URL like nats://nats.switchyard-system.svc:4222"
            ));
        };
        if !matches!(scheme, "nats" | "tls") || rest.is_empty() || rest.starts_with(':') {
            return Err(format!(
                "{u:?} is not a NATS URL like nats://nats.switchyard-system.svc:4222 (scheme nats:// or tls://, and a host)"
            ));
        }
    }
    Ok(urls.join(","))
}

/// Parses a backlog interval or timeout: between 100 ms and 5 min.
fn backlog_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 2s or 500ms: {e}"))?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(300) {
        return Err(format!("{text:?} is not between 100ms and 5m"));
    }
    Ok(d)
}

/// Parses an issuer activation delay: a duration of at most an hour.
fn activation_delay(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 30s or 2m: {e}"))?;
    if d > Duration::from_secs(3600) {
        return Err(format!("{text:?} is longer than 1h"));
    }
    Ok(d)
}

/// Parses a DNS name a certificate can carry: dot-separated labels of letters, digits and `-`.
fn dns_name(text: &str) -> Result<String, String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if text.len() > 253 || !text.split('.').all(label_ok) {
        return Err(format!(
            "{text:?} is not a DNS name (labels of letters, digits and '-', joined by dots)"
        ));
    }
    Ok(text.to_ascii_lowercase())
}

/// Parses a certificate lifetime: a duration between 10 s and 30 days.
fn lifetime(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 24h or 90m: {e}"))?;
    if d < Duration::from_secs(10) || d > Duration::from_secs(30 * 24 * 3600) {
        return Err(format!("{text:?} is not between 10s and 30d"));
    }
    Ok(d)
}

/// A start-up setting the operator refuses, naming the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{flag} {url:?} is not a URL: {reason}")]
    NotAUrl {
        flag: &'static str,
        url: String,
        reason: String,
    },
    #[error(
        "{flag} {url:?} must start with https:// (the control plane is TLS only with mesh TLS on; --mesh-tls=false for h2c)"
    )]
    NeedsHttps { flag: &'static str, url: String },
    #[error("{flag} {url:?} must start with http:// with --mesh-tls=false")]
    NeedsHttp { flag: &'static str, url: String },
    #[error("{flag} {url:?} has no host")]
    NoHost { flag: &'static str, url: String },
    #[error(
        "mesh TLS is on (--mesh-tls, SWITCHYARD_MESH_TLS) but --control-plane-url (SWITCHYARD_CONTROL_PLANE_URL) is unset: sidecars would have no Identity service to certify against and run on plain TCP; set --control-plane-url to the operator's Service (https://...), or --mesh-tls=false to run the mesh on plain TCP knowingly"
    )]
    MeshWithoutControlPlane,
    #[error(
        "--jetstream-access-secret needs mesh TLS (--mesh-tls): the JetStream servers' certificate and users come from the mesh CA"
    )]
    AccessSecretWithoutMesh,
    #[error(
        "the JetStream server {servers} is plaintext (nats://) while the mesh runs mutual TLS: any pod that reaches it could read, publish or delete every namespace's durable events. Use tls:// with a server that takes only mesh certificates (the chart's jetstream.enabled does), or set --jetstream-insecure (the chart's jetstream.insecure) to accept that knowingly"
    )]
    PlaintextJetStream { servers: String },
}

/// The flags whose values are control-plane URLs.
pub(crate) const CONTROL_PLANE_URL: &str = "--control-plane-url";
const PEER_URL: &str = "--peer-url";
const IDENTITY_URL: &str = "--identity-url";

/// Checks a control-plane URL given as `flag`: `https` with a host under mesh TLS, `http` without.
pub(crate) fn check_control_plane_url(
    flag: &'static str,
    url: &str,
    mesh_tls: bool,
) -> Result<(), SettingsError> {
    let uri = parse_url(flag, url)?;
    let url = url.to_owned();
    match (uri.scheme_str(), mesh_tls) {
        (Some("https"), true) | (Some("http"), false) => {}
        (_, true) => return Err(SettingsError::NeedsHttps { flag, url }),
        (_, false) => return Err(SettingsError::NeedsHttp { flag, url }),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(SettingsError::NoHost { flag, url });
    }
    Ok(())
}

fn parse_url(flag: &'static str, url: &str) -> Result<axum::http::Uri, SettingsError> {
    url.parse()
        .map_err(|e: axum::http::uri::InvalidUri| SettingsError::NotAUrl {
            flag,
            url: url.to_owned(),
            reason: e.to_string(),
        })
}

/// The control-plane `url` with its port replaced by (or set to) `port`.
fn with_port(url: &str, port: u16) -> Result<String, SettingsError> {
    let uri = parse_url(CONTROL_PLANE_URL, url)?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(SettingsError::NoHost {
            flag: CONTROL_PLANE_URL,
            url: url.to_owned(),
        });
    };
    let host = match authority.port() {
        Some(_) => authority
            .as_str()
            .rsplit_once(':')
            .map_or(authority.as_str(), |(h, _)| h),
        None => authority.as_str(),
    };
    Ok(format!("{scheme}://{host}:{port}"))
}

impl Settings {
    /// Refuses mesh TLS with nothing for the sidecars to certify against: without a control-plane
    /// URL their pods get no Identity service, and they would run on plain TCP while the operator
    /// says mesh TLS is on. Fail closed, naming the missing setting.
    pub fn check_mesh(&self) -> Result<(), SettingsError> {
        if self.mesh_tls && self.control_plane_url.is_none() {
            return Err(SettingsError::MeshWithoutControlPlane);
        }
        self.check_jetstream()
    }

    /// Refuses durable events in the clear inside a mutual-TLS mesh: a `nats://` server takes any
    /// client, so every pod that reaches it could read or delete every namespace's events. Only
    /// `--jetstream-insecure` accepts it, knowingly; the access Secret needs the mesh's CA.
    fn check_jetstream(&self) -> Result<(), SettingsError> {
        if self.jetstream_access_secret.is_some() && !self.mesh_tls {
            return Err(SettingsError::AccessSecretWithoutMesh);
        }
        let plain: Vec<&str> = self
            .jetstream_url
            .iter()
            .flat_map(|u| u.split(','))
            .map(str::trim)
            .filter(|u| u.starts_with("nats://"))
            .collect();
        if self.mesh_tls && !self.jetstream_insecure && !plain.is_empty() {
            return Err(SettingsError::PlaintextJetStream {
                servers: plain.join(", "),
            });
        }
        Ok(())
    }

    /// The URL other replicas forward to (see `--peer-url`); None when nothing names a host.
    pub fn peer_url(&self) -> Result<Option<String>, SettingsError> {
        if let Some(url) = &self.peer_url {
            check_control_plane_url(PEER_URL, url, self.mesh_tls)?;
            return Ok(Some(url.clone()));
        }
        let scheme = if self.mesh_tls { "https" } else { "http" };
        let port = self.control_plane_addr.port();
        if let Some(ip) = self.pod_ip {
            return Ok(Some(format!("{scheme}://{}", SocketAddr::new(ip, port))));
        }
        let addr = self.control_plane_addr;
        Ok((!addr.ip().is_unspecified()).then(|| format!("{scheme}://{addr}")))
    }

    /// The URL sidecars certify at (mesh TLS on and a control-plane URL given): `--identity-url`,
    /// or the control-plane URL with the Identity port.
    pub fn identity_url(&self) -> Result<Option<String>, SettingsError> {
        if !self.mesh_tls {
            return Ok(None);
        }
        if let Some(url) = &self.identity_url {
            check_control_plane_url(IDENTITY_URL, url, true)?;
            return Ok(Some(url.clone()));
        }
        let Some(cp) = &self.control_plane_url else {
            return Ok(None);
        };
        Ok(Some(with_port(cp, self.identity_addr.port())?))
    }

    /// The identity to hold the Lease under.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_else(|_| "operator".into());
            format!("{}-{}", host.trim(), std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_url_is_the_control_planes_host_on_the_identity_port_unless_given() {
        let base = |extra: &[&str]| {
            let mut args = vec!["op", "--control-plane-url=https://sy.system.svc:7443"];
            args.extend_from_slice(extra);
            Settings::try_parse_from(args).expect("settings")
        };
        assert_eq!(
            base(&[]).identity_url().expect("derived"),
            Some("https://sy.system.svc:7444".into())
        );
        assert_eq!(
            base(&["--identity-addr=0.0.0.0:9000"])
                .identity_url()
                .expect("derived"),
            Some("https://sy.system.svc:9000".into())
        );
        assert_eq!(
            base(&["--identity-url=https://id.system.svc:1"])
                .identity_url()
                .expect("given"),
            Some("https://id.system.svc:1".into())
        );
        let e = base(&["--identity-url=http://id:1"])
            .identity_url()
            .expect_err("plain");
        assert!(e.to_string().contains("--identity-url"), "{e}");
        assert_eq!(
            with_port("https://[::1]:7443", 7444).expect("v6"),
            "https://[::1]:7444"
        );
        assert_eq!(
            base(&["--mesh-tls=false"]).identity_url().expect("off"),
            None
        );
    }

    #[test]
    fn control_plane_urls_need_the_scheme_of_the_mode_and_a_host() {
        assert!(
            check_control_plane_url(
                CONTROL_PLANE_URL,
                "https://switchyard.system.svc:7443",
                true
            )
            .is_ok()
        );
        assert!(check_control_plane_url(CONTROL_PLANE_URL, "http://10.0.0.1:7443", false).is_ok());
        let e = check_control_plane_url(CONTROL_PLANE_URL, "http://10.0.0.1:7443", true)
            .expect_err("h2c");
        assert!(e.to_string().contains("https://"), "{e}");
        assert!(
            check_control_plane_url(CONTROL_PLANE_URL, "https://10.0.0.1:7443", false).is_err()
        );
        let e = check_control_plane_url(CONTROL_PLANE_URL, "switchyard:7443", false)
            .expect_err("no scheme");
        assert!(e.to_string().contains("http://"), "{e}");
        assert!(check_control_plane_url(CONTROL_PLANE_URL, "grpc://x:1", true).is_err());
        assert!(check_control_plane_url(CONTROL_PLANE_URL, "https://", true).is_err());
    }

    #[test]
    fn lifetimes_are_bounded() {
        assert_eq!(lifetime("24h"), Ok(Duration::from_secs(24 * 3600)));
        assert!(lifetime("1s").is_err());
        assert!(lifetime("90d").is_err());
        assert!(lifetime("soon").expect_err("text").contains("soon"));
    }

    fn parse(args: &[&str]) -> Settings {
        let mut all = vec!["switchyard-operator"];
        all.extend_from_slice(args);
        Settings::try_parse_from(all).expect("settings")
    }

    #[test]
    fn mesh_tls_without_a_control_plane_url_is_refused_naming_it() {
        // Environment variables would fill the fields clap reads; these tests set neither.
        let e = parse(&[]).check_mesh().expect_err("fails closed");
        assert!(e.to_string().contains("--control-plane-url"), "{e}");
        assert!(e.to_string().contains("--mesh-tls=false"), "{e}");
        assert!(
            parse(&["--control-plane-url", "https://op.system.svc:7443"])
                .check_mesh()
                .is_ok()
        );
        assert!(parse(&["--mesh-tls=false"]).check_mesh().is_ok());
    }

    #[test]
    fn a_plaintext_jetstream_in_a_tls_mesh_is_refused_unless_accepted_knowingly() {
        let cp = ["--control-plane-url", "https://op.system.svc:7443"];
        let with = |more: &[&str]| {
            let mut args = cp.to_vec();
            args.extend_from_slice(more);
            parse(&args).check_mesh()
        };
        let e = with(&["--jetstream-url", "tls://a:4222,nats://b:4222"]).expect_err("refused");
        assert!(
            e.to_string().contains("nats://b:4222")
                && e.to_string().contains("--jetstream-insecure"),
            "{e}"
        );
        assert!(!e.to_string().contains("tls://a:4222"), "{e}");
        assert!(with(&["--jetstream-url", "nats://b:4222", "--jetstream-insecure"]).is_ok());
        assert!(with(&["--jetstream-url", "tls://a:4222"]).is_ok());
        assert!(
            parse(&["--mesh-tls=false", "--jetstream-url", "nats://b:4222"])
                .check_mesh()
                .is_ok()
        );
        let e = parse(&["--mesh-tls=false", "--jetstream-access-secret", "s"])
            .check_mesh()
            .expect_err("no CA");
        assert!(e.to_string().contains("--mesh-tls"), "{e}");
    }

    #[test]
    fn the_peer_url_comes_from_the_flag_the_pod_ip_or_a_bound_host() {
        let s = parse(&["--peer-url", "https://10.1.2.3:7443"]);
        assert_eq!(s.peer_url(), Ok(Some("https://10.1.2.3:7443".into())));
        let s = parse(&["--pod-ip", "10.1.2.3"]);
        assert_eq!(s.peer_url(), Ok(Some("https://10.1.2.3:7443".into())));
        let s = parse(&["--peer-url", "http://10.1.2.3:7443"]);
        assert!(
            s.peer_url()
                .expect_err("h2c under mesh TLS")
                .to_string()
                .contains("https://")
        );
        // Without mesh TLS the replicas talk h2c.
        let parse = |args: &[&str]| {
            let mut all = vec!["--mesh-tls", "false"];
            all.extend_from_slice(args);
            parse(&all)
        };
        let s = parse(&["--peer-url", "http://10.1.2.3:7443"]);
        assert_eq!(s.peer_url(), Ok(Some("http://10.1.2.3:7443".into())));
        let s = parse(&["--peer-url", "10.1.2.3:7443"]);
        assert!(
            s.peer_url()
                .expect_err("no scheme")
                .to_string()
                .contains("--peer-url")
        );
        let s = parse(&["--pod-ip", "fd00::7", "--control-plane-addr", "[::]:7443"]);
        assert_eq!(s.peer_url(), Ok(Some("http://[fd00::7]:7443".into())));
        let s = parse(&["--control-plane-addr", "127.0.0.1:9000"]);
        assert_eq!(s.peer_url(), Ok(Some("http://127.0.0.1:9000".into())));
        let s = parse(&["--control-plane-addr", "0.0.0.0:7443"]);
        assert_eq!(s.peer_url(), Ok(None));
    }

    #[test]
    fn jetstream_settings_are_checked() {
        let s = parse(&[]);
        assert_eq!(s.jetstream_url, None);
        assert_eq!(s.backlog_interval, Duration::from_secs(2));
        assert_eq!(s.backlog_timeout, Duration::from_secs(1));
        let s = parse(&[
            "--jetstream-url",
            "nats://a:4222, nats://b:4222",
            "--jetstream-replicas",
            "3",
            "--backlog-interval",
            "500ms",
        ]);
        assert_eq!(
            s.jetstream_url.as_deref(),
            Some("nats://a:4222,nats://b:4222")
        );
        assert_eq!(s.jetstream_replicas, 3);
        assert_eq!(s.backlog_interval, Duration::from_millis(500));
        let s = parse(&[
            "--mesh-tls=true",
            "--jetstream-access-secret",
            "sy-nats-access",
            "--jetstream-server-names",
            "sy-nats-0.sy-nats.sy.svc,sy-nats-1.sy-nats.sy.svc",
        ]);
        assert_eq!(
            s.jetstream_server_names,
            ["sy-nats-0.sy-nats.sy.svc", "sy-nats-1.sy-nats.sy.svc"]
        );
        for bad in [
            &["--jetstream-server-names", "a.svc"][..],
            &[
                "--jetstream-server-names",
                "a..svc",
                "--jetstream-access-secret=s",
            ],
            &[
                "--jetstream-server-names",
                "a b",
                "--jetstream-access-secret=s",
            ],
            &["--jetstream-url", "a:4222"],
            &["--jetstream-url", "http://a:4222"],
            &["--jetstream-url", "nats://a:4222,"],
            &["--jetstream-replicas", "0"],
            &["--backlog-timeout", "1ms"],
        ] {
            let mut all = vec!["switchyard-operator"];
            all.extend_from_slice(bad);
            let e = Settings::try_parse_from(all)
                .expect_err("refused")
                .to_string();
            assert!(e.contains(bad[0]), "{bad:?}: {e}");
        }
    }

    #[test]
    fn watch_namespaces_default_to_all_and_take_a_list() {
        assert_eq!(parse(&[]).watch_namespaces, Scope::All);
        let s = parse(&["--watch-namespaces", "team-b,team-a"]);
        assert_eq!(
            s.watch_namespaces,
            Scope::parse("team-a,team-b").expect("list")
        );
        assert!(s.watch_namespaces.contains("team-a"));
        assert!(!s.watch_namespaces.contains("default"));
        let e = Settings::try_parse_from(["switchyard-operator", "--watch-namespaces=a,B"])
            .expect_err("not a namespace")
            .to_string();
        assert!(
            e.contains("--watch-namespaces") && e.contains("\"B\""),
            "{e}"
        );
    }
}
