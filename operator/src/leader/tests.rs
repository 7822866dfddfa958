//! The election loops against an in-memory Lease, on tokio's paused clock: a hung renewal ends the
//! leadership before a standby may take over, so two leaders never overlap.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One Lease shared by every replica's store, with the API server's optimistic concurrency.
#[derive(Default)]
struct Server {
    lease: Mutex<Option<Lease>>,
    version: AtomicU64,
}

/// One replica's way to the Lease; `hung` makes every call of this replica hang forever.
struct Mem {
    server: Arc<Server>,
    hung: Arc<AtomicBool>,
}

impl Mem {
    fn new(server: &Arc<Server>) -> Mem {
        Mem {
            server: server.clone(),
            hung: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl LeaseStore for Mem {
    async fn get(&self) -> Result<Option<Lease>, kube::Error> {
        if self.hung.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(self.server.lease.lock().expect("lock").clone())
    }

    async fn write(&self, mut lease: Lease, create: bool) -> Result<bool, kube::Error> {
        if self.hung.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let mut cur = self.server.lease.lock().expect("lock");
        let current_rv = cur
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        if create != cur.is_none() || lease.metadata.resource_version != current_rv {
            return Ok(false);
        }
        let v = self.server.version.fetch_add(1, Ordering::SeqCst) + 1;
        lease.metadata.resource_version = Some(v.to_string());
        *cur = Some(lease);
        Ok(true)
    }
}

fn cfg(who: &str) -> LeaseConfig {
    LeaseConfig {
        url: Some(format!("http://{who}:7443")),
        ..LeaseConfig::new("l".into(), "ns".into(), who.into())
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_renewal_ends_the_leadership_before_a_standby_takes_over() {
    let server = Arc::new(Server::default());
    let (a, b) = (Mem::new(&server), Mem::new(&server));
    let (ca, cb) = (cfg("a"), cfg("b"));
    let metrics = Metrics::default();
    let va = LeaderView::default();
    let since = acquire(&a, &ca, &metrics, &va).await;
    assert!(va.is_me());

    let standby = tokio::spawn(async move {
        let vb = LeaderView::default();
        acquire(&b, &cb, &Metrics::default(), &vb).await;
        (Instant::now(), vb.get())
    });
    let hung = a.hung.clone();
    let leader = async {
        hold(&a, &ca, &metrics, &va, since).await;
        Instant::now()
    };
    let partition = async {
        tokio::time::sleep(Duration::from_secs(20)).await;
        hung.store(true, Ordering::SeqCst);
        Instant::now()
    };
    let (stepped_down, cut) = tokio::join!(leader, partition);
    let (took_over, b_view) = standby.await.expect("standby");
    assert_eq!(b_view, Leader::Me);
    assert!(!va.is_me());
    assert!(
        stepped_down < took_over,
        "the old leader stepped down {:?} after the partition, the standby took over {:?} after it",
        stepped_down - cut,
        took_over - cut
    );
    assert!(
        stepped_down - cut <= ca.timing.renew_deadline,
        "stepped down {:?} after the partition",
        stepped_down - cut
    );
}

#[tokio::test(start_paused = true)]
async fn a_live_leader_keeps_the_lease_and_the_standby_learns_its_url() {
    let server = Arc::new(Server::default());
    let (a, b) = (Mem::new(&server), Mem::new(&server));
    let (ca, cb) = (cfg("a"), cfg("b"));
    let metrics = Metrics::default();
    let (va, vb) = (LeaderView::default(), LeaderView::default());
    let since = acquire(&a, &ca, &metrics, &va).await;
    let outcome = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(
            hold(&a, &ca, &metrics, &va, since),
            acquire(&b, &cb, &metrics, &vb)
        )
    })
    .await;
    assert!(
        outcome.is_err(),
        "neither loop may end while the leader renews"
    );
    assert!(va.is_me());
    assert_eq!(
        vb.get(),
        Leader::Other {
            identity: "a".into(),
            url: Some("http://a:7443".into())
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_within_a_retry() {
    let server = Arc::new(Server::default());
    let (a, b) = (Mem::new(&server), Mem::new(&server));
    let (ca, cb) = (cfg("a"), cfg("b"));
    let metrics = Metrics::default();
    let (va, vb) = (LeaderView::default(), LeaderView::default());
    acquire(&a, &ca, &metrics, &va).await;
    release(&a, &ca).await;
    let t0 = Instant::now();
    acquire(&b, &cb, &metrics, &vb).await;
    assert!(Instant::now() - t0 <= cb.timing.retry);
    assert!(vb.is_me());
}
