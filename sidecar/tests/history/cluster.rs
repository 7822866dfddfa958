//! A 3-node nats-server cluster the history run can hurt: each node killed (-9) and restarted on
//! the ports of its first life, paused (SIGSTOP) and resumed, or partitioned from the others.
//! Every route between two nodes runs through a link of its own (a loopback relay per ordered
//! pair), so cutting a node's links separates it from its peers while its clients stay connected:
//! the minority-node case. Loopback only; no network namespaces.

use crate::common::{Http, nats::nats_server, poll};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A free loopback port: bound, read and released (the node takes it a moment later).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A relay that can be cut: cutting drops its live connections and every new one until healed.
struct Link {
    port: u16,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    async fn start(to: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (open, rx) = watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let mut rx = rx.clone();
                if !*rx.borrow() {
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", to)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = rx.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Link { port, open, task }
    }

    fn set(&self, open: bool) {
        self.open.send_replace(open);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Node {
    name: String,
    conf: PathBuf,
    log: PathBuf,
    client: u16,
    monitor: u16,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(nats_server())
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let ok = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill {sig} {}", self.name);
        }
    }
}

/// Three JetStream servers (`n0`..`n2`), `sync_interval: always` as the chart runs them.
pub struct Cluster {
    nodes: Vec<Node>,
    /// `links[i][j]`: node i's route to node j (None on the diagonal).
    links: Vec<Vec<Option<Link>>>,
    http: Http,
}

impl Cluster {
    pub async fn start(dir: &Path) -> Cluster {
        const N: usize = 3;
        let route: Vec<u16> = (0..N).map(|_| free_port()).collect();
        let mut links = Vec::new();
        for i in 0..N {
            let mut row = Vec::new();
            for (j, port) in route.iter().enumerate() {
                row.push(if i == j {
                    None
                } else {
                    Some(Link::start(*port).await)
                });
            }
            links.push(row);
        }
        // Gossiped route addresses would bypass the links: each node advertises one nobody serves.
        let nowhere = free_port();
        let mut nodes = Vec::new();
        for (i, row) in links.iter().enumerate() {
            let routes = row
                .iter()
                .flatten()
                .map(|l| format!("\"nats://127.0.0.1:{}\"", l.port))
                .collect::<Vec<_>>()
                .join(", ");
            let (client, monitor) = (free_port(), free_port());
            let store = dir.join(format!("js{i}"));
            std::fs::create_dir_all(&store).unwrap();
            let conf = format!(
                "listen: \"127.0.0.1:{client}\"\nhttp: \"127.0.0.1:{monitor}\"\nserver_name: n{i}\n\
                 max_payload: 16842752\n\
                 jetstream {{ store_dir: {:?}\nsync_interval: always\n }}\n\
                 cluster {{ name: history, listen: \"127.0.0.1:{}\", advertise: \"127.0.0.1:{nowhere}\", \
                 routes: [{routes}] }}\n",
                store.to_str().unwrap(),
                route[i]
            );
            let path = dir.join(format!("nats{i}.conf"));
            std::fs::write(&path, conf).unwrap();
            let mut node = Node {
                name: format!("n{i}"),
                conf: path,
                log: dir.join(format!("nats{i}.log")),
                client,
                monitor,
                child: None,
            };
            node.spawn();
            nodes.push(node);
        }
        let c = Cluster {
            nodes,
            links,
            http: Http::new(),
        };
        c.wait_healthy(Duration::from_secs(60)).await;
        c
    }

    /// The client URL list.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node named `name` (`n0`..), as a stream's leader is reported.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Whether every node reports itself healthy: JetStream up and its streams and consumers current
    /// (`/healthz` without options checks them).
    async fn healthy(&self) -> bool {
        for n in &self.nodes {
            let url = format!("http://127.0.0.1:{}/healthz", n.monitor);
            match self.http.get(&url).await {
                Ok(r) if r.status == 200 => {}
                _ => return false,
            }
        }
        true
    }

    /// Waits until every node is healthy (after a fault healed, before the next one).
    pub async fn wait_healthy(&self, limit: Duration) {
        poll(limit, "every nats-server healthy", || async {
            self.healthy().await.then_some(())
        })
        .await;
    }

    /// The JetStream meta leader, as the first node that answers `/jsz` names it.
    pub async fn meta_leader(&self, http: &Http) -> String {
        for n in &self.nodes {
            let url = format!("http://127.0.0.1:{}/jsz", n.monitor);
            if let Ok(r) = http.get(&url).await
                && let Some(leader) = r.json()["meta_cluster"]["leader"].as_str()
            {
                return leader.to_owned();
            }
        }
        String::new()
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self, i: usize) {
        self.nodes[i].spawn();
    }

    pub fn pause(&self, i: usize) {
        self.nodes[i].signal("-STOP");
    }

    pub fn resume(&self, i: usize) {
        self.nodes[i].signal("-CONT");
    }

    /// Cuts (or heals) every route between node `i` and its peers, both directions.
    pub fn partition(&self, i: usize, cut: bool) {
        for (a, row) in self.links.iter().enumerate() {
            for (b, link) in row.iter().enumerate() {
                if let Some(l) = link
                    && (a == i || b == i)
                {
                    l.set(!cut);
                }
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.resume(i);
            self.kill(i);
        }
    }
}
