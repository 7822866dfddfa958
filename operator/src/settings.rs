//! Command-line settings of the operator, validated once at start-up.

use clap::{Parser, ValueEnum};
use std::net::{IpAddr, SocketAddr};

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
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "SWITCHYARD_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of the control-plane gRPC server (routing tables, load reports); every replica serves it.
    #[arg(
        long,
        env = "SWITCHYARD_CONTROL_PLANE_ADDR",
        default_value = "0.0.0.0:7443"
    )]
    pub control_plane_addr: SocketAddr,
    /// URL at which sidecars reach the control plane (the chart sets
    /// `http://<release service>.<namespace>.svc:<port>`). Unset: sidecars get no control plane and
    /// find Manager pods by DNS of their Services.
    #[arg(long, env = "SWITCHYARD_CONTROL_PLANE_URL")]
    pub control_plane_url: Option<String>,
    /// Image of the sidecar the operator injects into Router and Manager pods.
    #[arg(
        long,
        env = "SWITCHYARD_SIDECAR_IMAGE",
        default_value = "ghcr.io/switchyard-dev/switchyard-sidecar:0.1.0"
    )]
    pub sidecar_image: String,
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
    /// URL at which the other replicas reach this one's control plane. The leader writes it into
    /// the Lease, and standbys forward load reports and activations there. Unset:
    /// `http://<POD_IP>:<control-plane port>`, or `http://<--control-plane-addr>` when that names a
    /// host.
    #[arg(long, env = "SWITCHYARD_PEER_URL")]
    pub peer_url: Option<String>,
    /// This pod's IP (the chart sets it from the downward API), for the default `--peer-url`.
    #[arg(long, env = "POD_IP")]
    pub pod_ip: Option<IpAddr>,
}

/// Checks a control-plane URL: `http` with a host (sidecars have no TLS client yet).
pub fn check_control_plane_url(url: &str) -> Result<(), String> {
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|e| format!("--control-plane-url {url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        _ => {
            return Err(format!(
                "--control-plane-url {url:?} must start with http:// (sidecars have no TLS client yet)"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("--control-plane-url {url:?} has no host"));
    }
    Ok(())
}

impl Settings {
    /// The URL other replicas forward to (see `--peer-url`); None when nothing names a host.
    pub fn peer_url(&self) -> Result<Option<String>, String> {
        if let Some(url) = &self.peer_url {
            check_control_plane_url(url)
                .map_err(|e| e.replace("--control-plane-url", "--peer-url"))?;
            return Ok(Some(url.clone()));
        }
        let port = self.control_plane_addr.port();
        if let Some(ip) = self.pod_ip {
            return Ok(Some(format!("http://{}", SocketAddr::new(ip, port))));
        }
        let addr = self.control_plane_addr;
        Ok((!addr.ip().is_unspecified()).then(|| format!("http://{addr}")))
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
    fn control_plane_urls_need_http_and_a_host() {
        assert!(check_control_plane_url("http://switchyard.system.svc:7443").is_ok());
        assert!(check_control_plane_url("http://10.0.0.1:7443").is_ok());
        assert!(check_control_plane_url("https://10.0.0.1:7443").is_err());
        let e = check_control_plane_url("switchyard:7443").expect_err("no scheme");
        assert!(e.contains("http://"), "{e}");
        assert!(check_control_plane_url("grpc://x:1").is_err());
        assert!(check_control_plane_url("http://").is_err());
    }

    fn parse(args: &[&str]) -> Settings {
        let mut all = vec!["switchyard-operator"];
        all.extend_from_slice(args);
        Settings::try_parse_from(all).expect("settings")
    }

    #[test]
    fn the_peer_url_comes_from_the_flag_the_pod_ip_or_a_bound_host() {
        let s = parse(&["--peer-url", "http://10.1.2.3:7443"]);
        assert_eq!(s.peer_url(), Ok(Some("http://10.1.2.3:7443".into())));
        let s = parse(&["--peer-url", "10.1.2.3:7443"]);
        assert!(s.peer_url().expect_err("no scheme").contains("--peer-url"));
        let s = parse(&["--pod-ip", "fd00::7", "--control-plane-addr", "[::]:7443"]);
        assert_eq!(s.peer_url(), Ok(Some("http://[fd00::7]:7443".into())));
        let s = parse(&["--control-plane-addr", "127.0.0.1:9000"]);
        assert_eq!(s.peer_url(), Ok(Some("http://127.0.0.1:9000".into())));
        let s = parse(&["--control-plane-addr", "0.0.0.0:7443"]);
        assert_eq!(s.peer_url(), Ok(None));
    }
}
