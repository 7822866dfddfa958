//! The chart's JetStream cluster routes over mutual TLS, with the real nats-server: the chart's
//! rendered `nats.conf` (`helm template`), the certificate the operator issues the servers (its
//! `nats_access` code, for the route hosts the chart passes it), and three servers that dial each
//! other by the chart's route names. Each server runs in a mount namespace of its own whose
//! `/etc/hosts` points those names at loopback addresses, so the names the routes use (and that
//! the servers check against the certificate) are the chart's. Only the paths and listen addresses
//! of the rendered file are moved to the test's folder. The three form one JetStream cluster; a
//! server that routes to them without TLS, with a certificate of another CA, or with a Manager's
//! mesh certificate is refused.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use switchyard_identity::{Ca, Kind, SpiffeId, Subject};
use switchyard_operator::nats_access;

const RELEASE: &str = "switchyard";
const NAMESPACE: &str = "switchyard-system";
/// Loopback addresses of the three servers (`127.77.0.1`..`.3`) and of the intruders (`.4`..):
/// every server keeps the chart's ports, so each needs an address of its own.
const NET: &str = "127.77.0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `e2e/cluster/build-nats`: builds nats-server once into the tool folder, prints its path.
fn nats_server() -> PathBuf {
    let script = repo().join("e2e/cluster/build-nats");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The chart rendered with its JetStream cluster, as documents.
fn render(dir: &Path) -> Vec<serde_json::Value> {
    let helm = repo().join(".tools/bin/helm");
    let out = Command::new(&helm)
        .args(["template", RELEASE])
        .arg(repo().join("charts/switchyard"))
        .args(["--namespace", NAMESPACE, "--set", "jetstream.enabled=true"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HELM_CACHE_HOME", dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", dir.join("helm/config"))
        .env("HELM_DATA_HOME", dir.join("helm/data"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", helm.display()));
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_saphyr::from_multiple(&text).expect("helm template output parses")
}

fn find<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The operator's `--name=value` argument in the rendered Deployment.
fn operator_arg(docs: &[serde_json::Value], name: &str) -> String {
    let args =
        &find(docs, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"][0]["args"];
    let prefix = format!("--{name}=");
    args.as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str()?.strip_prefix(&prefix))
        .next()
        .unwrap_or_else(|| panic!("no {prefix} in the operator's args: {args}"))
        .to_owned()
}

/// A body from a server's monitoring port (HTTP/1.0, read to the end).
fn monitor(ip: &str, path: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect((ip, 8222)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    loop {
        match ok() {
            Ok(()) => return,
            Err(e) if start.elapsed() > limit => panic!("{what} within {limit:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// One nats-server in a mount namespace whose `/etc/hosts` is `hosts`; killed when dropped.
struct Server {
    name: String,
    log: PathBuf,
    child: Child,
}

impl Server {
    fn start(bin: &Path, name: &str, conf: &Path, hosts: &Path, log: PathBuf) -> Server {
        let out = std::fs::File::create(&log).expect("log");
        // `unshare` execs its command and sh execs the server: the child's pid is the server's.
        let child = Command::new("unshare")
            .args(["--mount", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
            .arg(hosts)
            .arg(bin)
            .arg("-c")
            .arg(conf)
            .env("POD_NAME", name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("unshare");
        Server {
            name: name.to_owned(),
            log,
            child,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rendered configuration with its paths under `dir` and its listeners on `ip`.
fn localize(conf: &str, dir: &Path, ip: &str) -> String {
    let d = dir.display();
    conf.replace("/etc/nats-access/", &format!("{d}/nats-access/"))
        .replace("store_dir: /data", &format!("store_dir: {d}/data"))
        .replace("/var/run/nats/", &format!("{d}/run/"))
        .replace("0.0.0.0:", &format!("{ip}:"))
}

/// Writes `files` (name, text) into `dir`, making it.
fn write_all(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).expect("dir");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write");
    }
}

struct Intruder {
    /// Last octet of its address.
    host: u8,
    what: &'static str,
    /// What the first server logs when it refuses it.
    refusal: &'static str,
    /// Its `cluster { tls {} }` block, or none.
    tls: Option<String>,
}

#[test]
fn the_charts_servers_route_over_mesh_tls_and_refuse_other_routes() {
    let bin = nats_server();
    let dir = std::env::temp_dir().join(format!("nats-routes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let docs = render(&dir);
    let conf = find(&docs, "ConfigMap", "switchyard-nats")["data"]["nats.conf"]
        .as_str()
        .expect("nats.conf")
        .to_owned();
    let names: Vec<String> = operator_arg(&docs, "jetstream-server-names")
        .split(',')
        .map(str::to_owned)
        .collect();
    let trust_domain = operator_arg(&docs, "trust-domain");
    assert_eq!(names.len(), 3, "{names:?}");

    // The servers' certificate and access block as the operator's leader writes them.
    let now = SystemTime::now();
    let (ca, ca_pem) = Ca::generate(&trust_domain, now).expect("mesh CA");
    let cert = nats_access::issue(
        &ca,
        &trust_domain,
        NAMESPACE,
        &names,
        Duration::from_secs(3600),
        now,
    )
    .expect("server certificate");
    let operator = SpiffeId::new(&trust_domain, NAMESPACE, Kind::Operator, RELEASE).expect("id");
    let users = nats_access::users(std::iter::empty(), &trust_domain, &operator);
    let access = switchyard_protocol::nats_access::authorization_block(&users.users);

    let hosts: String = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{NET}.{} {n}\n", i + 1))
        .collect();
    let hosts_file = dir.join("hosts");
    std::fs::write(&hosts_file, format!("127.0.0.1 localhost\n{hosts}")).expect("hosts");

    let mut servers = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let pod = name.split('.').next().expect("pod name").to_owned();
        let home = dir.join(&pod);
        write_all(
            &home.join("nats-access"),
            &[
                (nats_access::CERT_KEY, &cert.chain),
                (nats_access::KEY_KEY, &cert.key),
                (nats_access::TRUST_KEY, &ca_pem.cert),
                (nats_access::ACCESS_KEY, &access),
            ],
        );
        let ip = format!("{NET}.{}", i + 1);
        // `include ../nats-access/access.conf` is relative to the file: nats/ beside nats-access/.
        write_all(
            &home.join("nats"),
            &[("nats.conf", &localize(&conf, &home, &ip))],
        );
        std::fs::create_dir_all(home.join("run")).expect("run dir");
        let path = home.join("nats/nats.conf");
        let checked = Command::new(&bin)
            .arg("-t")
            .arg("-c")
            .arg(&path)
            .env("POD_NAME", &pod)
            .output()
            .expect("nats-server -t");
        assert!(
            checked.status.success(),
            "nats-server -t refuses the chart's configuration: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let log = home.join("nats-server.log");
        servers.push(Server::start(&bin, &pod, &path, &hosts_file, log));
    }
    let logs = |servers: &[Server]| -> String {
        servers
            .iter()
            .map(|s| format!("--- {} ---\n{}", s.name, s.log()))
            .collect()
    };

    // One cluster: each server routed to both others, and one JetStream meta group of three with
    // a leader (its Raft traffic runs over those routes).
    let pods: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
    let formed = std::panic::catch_unwind(|| {
        wait_for(
            "a 3-node cluster over TLS routes",
            Duration::from_secs(60),
            || {
                for (i, pod) in pods.iter().enumerate() {
                    let ip = format!("{NET}.{}", i + 1);
                    let routez = monitor(&ip, "/routez").ok_or(format!("{pod}: no /routez"))?;
                    let mut peers: Vec<&str> = routez["routes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r["remote_name"].as_str())
                        .collect();
                    peers.sort_unstable();
                    peers.dedup();
                    let others: Vec<&str> = pods
                        .iter()
                        .filter(|p| *p != pod)
                        .map(String::as_str)
                        .collect();
                    if peers != others {
                        return Err(format!("{pod} routes to {peers:?}"));
                    }
                    let jsz = monitor(&ip, "/jsz").ok_or(format!("{pod}: no /jsz"))?;
                    let meta = &jsz["meta_cluster"];
                    if meta["cluster_size"] != 3 || meta["leader"].as_str().unwrap_or("").is_empty()
                    {
                        return Err(format!("{pod}: meta cluster {meta}"));
                    }
                }
                Ok(())
            },
        )
    });
    if let Err(e) = formed {
        eprintln!("{}", logs(&servers));
        std::panic::resume_unwind(e);
    }

    // The operator renews the certificate and the reloader signals each server (SIGHUP): the new
    // one is taken for the routes without a restart, and the routes dialled after it use it.
    let renewed = nats_access::issue(
        &ca,
        &trust_domain,
        NAMESPACE,
        &names,
        Duration::from_secs(3600),
        SystemTime::now(),
    )
    .expect("renewed certificate");
    for s in &servers {
        let access = dir.join(&s.name).join("nats-access");
        std::fs::write(access.join(nats_access::CERT_KEY), &renewed.chain).expect("write");
        std::fs::write(access.join(nats_access::KEY_KEY), &renewed.key).expect("write");
        let hup = Command::new("kill")
            .args(["-HUP", &s.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(hup.success(), "SIGHUP {}", s.name);
    }
    let reloaded = std::panic::catch_unwind(|| {
        wait_for("every server reloaded", Duration::from_secs(30), || {
            for s in &servers {
                let log = s.log();
                if log.contains("Failed to reload") {
                    return Err(format!("{} refused the reload", s.name));
                }
                if !log.contains("Reloaded server configuration") {
                    return Err(format!("{} not yet", s.name));
                }
            }
            Ok(())
        })
    });
    if let Err(e) = reloaded {
        eprintln!("{}", logs(&servers));
        std::panic::resume_unwind(e);
    }

    // Servers that try to join: the cluster's own name and route, but no mesh certificate, or a
    // mesh certificate that is not the servers' (a Manager's sidecar holds one).
    let (other_ca, other_pem) = Ca::generate(&trust_domain, now).expect("another CA");
    let stranger = nats_access::issue(
        &other_ca,
        &trust_domain,
        NAMESPACE,
        &names,
        Duration::from_secs(3600),
        now,
    )
    .expect("a certificate of another CA");
    let manager = SpiffeId::new(&trust_domain, "shop", Kind::Manager, "orders").expect("id");
    let (issued, key) = ca
        .issue_with_new_key(
            &Subject {
                id: manager,
                pod: "orders-0".into(),
            },
            Duration::from_secs(3600),
            now,
        )
        .expect("a Manager's certificate");
    let manager_chain = switchyard_identity::pem::certs(&issued.chain);
    let manager_key = key.serialize_pem();
    let tls_block = |home: &Path, chain: &str, key: &str, trust: &str| {
        write_all(
            &home.join("tls"),
            &[("tls.crt", chain), ("tls.key", key), ("ca.crt", trust)],
        );
        let t = home.join("tls");
        let t = t.display();
        format!(
            "tls {{ cert_file: \"{t}/tls.crt\", key_file: \"{t}/tls.key\", ca_file: \"{t}/ca.crt\", verify: true }}"
        )
    };
    let intruders = [
        Intruder {
            host: 4,
            what: "without TLS",
            refusal: "TLS route handshake error",
            tls: None,
        },
        Intruder {
            host: 5,
            what: "with a certificate of another CA",
            refusal: "TLS route handshake error",
            tls: Some(tls_block(
                &dir.join("intruder-5"),
                &stranger.chain,
                &stranger.key,
                &ca_pem.cert,
            )),
        },
        Intruder {
            host: 6,
            what: "with a Manager's mesh certificate",
            // Its chain is the mesh's: the handshake passes, and its identity is refused.
            refusal: "authentication error",
            tls: Some(tls_block(
                &dir.join("intruder-6"),
                &manager_chain,
                &manager_key,
                &ca_pem.cert,
            )),
        },
    ];
    drop(other_pem);
    let cluster_name = find(&docs, "StatefulSet", "switchyard-nats")["spec"]["serviceName"]
        .as_str()
        .expect("service name")
        .to_owned();
    for intruder in intruders {
        let ip = format!("{NET}.{}", intruder.host);
        let home = dir.join(format!("intruder-{}", intruder.host));
        std::fs::create_dir_all(home.join("data")).expect("dir");
        let conf = format!(
            "server_name: intruder-{host}\nlisten: \"{ip}:4222\"\nhttp: \"{ip}:8222\"\n\
             jetstream {{ store_dir: \"{store}\" }}\n\
             cluster {{ name: {cluster_name}, listen: \"{ip}:6222\", {tls}\n routes: [nats://{route}:6222] }}\n",
            host = intruder.host,
            store = home.join("data").display(),
            tls = intruder.tls.clone().unwrap_or_default(),
            route = names[0],
        );
        write_all(&home, &[("nats.conf", &conf)]);
        let pod = format!("intruder-{}", intruder.host);
        // Connections from loopback come from 127.0.0.1 whatever the dialler's address: a refusal
        // is the intruder's when it is logged after the intruder started.
        let before = servers[0].log().len();
        let server = Server::start(
            &bin,
            &pod,
            &home.join("nats.conf"),
            &hosts_file,
            home.join("nats-server.log"),
        );
        // Refused by the first server, which logs the refusal of a route: a TLS handshake that
        // fails, or a certificate that is not the servers'.
        let refused = std::panic::catch_unwind(|| {
            wait_for(
                &format!("a route {} refused", intruder.what),
                Duration::from_secs(30),
                || {
                    let log = servers[0].log();
                    let line = log
                        .get(before..)
                        .unwrap_or_default()
                        .lines()
                        .find(|l| l.contains("rid:") && l.contains(intruder.refusal));
                    line.map(|_| ()).ok_or_else(|| "not yet".to_owned())
                },
            )
        });
        let routez = monitor(&format!("{NET}.1"), "/routez").expect("routez");
        let joined = routez["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["remote_name"] == pod.as_str());
        if refused.is_err() || joined {
            eprintln!("{}\n--- {pod} ---\n{}", logs(&servers), server.log());
        }
        assert!(refused.is_ok(), "a route {} was not refused", intruder.what);
        assert!(
            !joined,
            "a server {} joined the cluster: {routez}",
            intruder.what
        );
        drop(server);
    }
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}
