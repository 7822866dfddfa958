//! The backlog of durable Managers, read from JetStream by the leader for its autoscaler.
//!
//! Every pod of a Manager pulls from the same durable consumers, so a per-pod report would count
//! one backlog once per pod: the leader reads each consumer itself (async-nats), once per
//! `--backlog-interval`, each Manager's read bounded by `--backlog-timeout`, several Managers at a
//! time. The figures land in [`Backlogs`], which the autoscaler reads without waiting (a snapshot
//! under a short lock); a figure older than three intervals is not used, so a read that keeps failing
//! leaves the autoscaler on the sidecars' reports. This task never touches the reconcile loop.
//!
//! Each durable Manager with scaling enabled carries a `BacklogRead` condition, written under its
//! own field manager only when its status, reason or message changes: True while reads succeed,
//! False with the error while they fail, and removed once the Manager is no longer read (no
//! longer durable or scaled). Reads are counted in
//! `switchyard_operator_backlog_reads_total{result}`.
//!
//! `lag` is pure; `read` does the JetStream calls; this module is the loop.

pub(crate) mod lag;
pub(crate) mod read;

use crate::context::Context;
use crate::scope::Stores;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_crds::status::BACKLOG_READ;

/// Field manager of the `BacklogRead` condition: apart from the controller's and the
/// autoscaler's, so server-side apply keeps each writer's fields.
pub(crate) const FIELD_MANAGER: &str = "switchyard-backlog";
/// Managers read at once.
const READERS: usize = 8;
/// Time to open the connection to a server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where and how often backlogs are read.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// NATS URL(s), comma-separated.
    pub url: String,
    /// Time between reads of a Manager.
    pub interval: Duration,
    /// Longest one Manager's read may take.
    pub timeout: Duration,
    /// The operator's mesh certificate, shown to a `tls://` server (its NATS user may only read
    /// stream and consumer info); `None` with mesh TLS off.
    pub tls: Option<rustls::ClientConfig>,
}

/// Namespace, Manager, event type.
pub(crate) type Key = (String, String, String);

/// (namespace, Manager) -> when read, figures per event type.
type Latest = HashMap<(String, String), (Instant, BTreeMap<String, u64>)>;

/// What one Manager's read came to: the Manager, its namespace and name, and the error if any.
type Outcome = (Arc<Manager>, String, String, Result<(), String>);

/// The latest backlog figures per Manager, shared with the autoscaler.
#[derive(Debug)]
pub(crate) struct Backlogs {
    max_age: Duration,
    latest: Mutex<Latest>,
}

impl Backlogs {
    /// A book whose figures count for three read intervals.
    pub(crate) fn new(interval: Duration) -> Backlogs {
        Backlogs {
            max_age: interval * 3,
            latest: Mutex::default(),
        }
    }

    fn put(&self, ns: &str, name: &str, at: Instant, figures: BTreeMap<String, u64>) {
        self.lock()
            .insert((ns.to_owned(), name.to_owned()), (at, figures));
    }

    fn retain(&self, keep: &HashSet<(String, String)>) {
        self.lock().retain(|k, _| keep.contains(k));
    }

    /// The figures read within the last three intervals before `now`.
    pub(crate) fn fresh(&self, now: Instant) -> HashMap<Key, u64> {
        let mut out = HashMap::new();
        for ((ns, name), (at, figures)) in self.lock().iter() {
            if now.saturating_duration_since(*at) > self.max_age {
                continue;
            }
            for (event, n) in figures {
                out.insert((ns.clone(), name.clone(), event.clone()), *n);
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Latest> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether the autoscaler reads `m`'s backlog: it scales and has durable types or subscriptions.
pub(crate) fn is_read(m: &Manager) -> bool {
    m.spec.scaling.enabled && m.spec.consumes_durably()
}

/// Whether `m`'s status carries the `BacklogRead` condition.
pub(crate) fn carries_condition(m: &Manager) -> bool {
    m.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == BACKLOG_READ))
}

/// Reads the backlogs of the scaled durable Managers every `settings.interval` until `shutdown`.
pub(crate) async fn run(
    ctx: Arc<Context>,
    book: Arc<Backlogs>,
    reader: Stores<Manager>,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let client = match connect(&settings.url, settings.tls.clone()).await {
        Ok(c) => c,
        Err(e) => {
            // The URL was checked at start-up; this is a client that could not even be built.
            tracing::error!(url = %settings.url, error = %e, "no JetStream client; durable backlogs are not read");
            return;
        }
    };
    let js = async_nats::jetstream::new(client.clone());
    tokio::select! {
        () = &mut shutdown => return,
        ready = reader.wait_until_ready() => if ready.is_err() { return },
    }
    tracing::info!(url = %settings.url, interval = ?settings.interval, "reading durable backlogs from JetStream");
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What each Manager's condition says now, so it is written only when that changes.
    let mut said: HashMap<(String, String), (bool, String)> = HashMap::new();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = tick.tick() => {}
        }
        let (managers, unread): (Vec<Arc<Manager>>, Vec<Arc<Manager>>) =
            reader.state().into_iter().partition(|m| is_read(m));
        // A Manager that stopped being durable (or scaled) keeps no stale condition: cleared until
        // the watch shows it gone (a failed write is tried again next tick).
        for m in unread.iter().filter(|m| carries_condition(m)) {
            if let Some(ns) = m.namespace() {
                clear_condition(&ctx, &ns, &m.name_any()).await;
            }
        }
        let alive: HashSet<(String, String)> = managers
            .iter()
            .filter_map(|m| Some((m.namespace()?, m.name_any())))
            .collect();
        book.retain(&alive);
        ctx.metrics.retain_backlogs(&alive);
        said.retain(|k, _| alive.contains(k));
        let results: Vec<Outcome> =
            futures::stream::iter(managers)
                .filter_map(|m| std::future::ready(m.namespace().map(|ns| (ns, m))))
                .map(|(ns, m)| {
                    let (js, client, book, ctx, settings) = (&js, &client, &book, &ctx, &settings);
                    async move {
                        let name = m.name_any();
                        let plans = read::plans(&ns, &name, &m);
                        let started = Instant::now();
                        let got = if client.connection_state()
                            != async_nats::connection::State::Connected
                        {
                            Err((
                                "error",
                                format!("not connected to JetStream at {}", settings.url),
                            ))
                        } else {
                            match tokio::time::timeout(
                                settings.timeout,
                                read::backlog(js, &ns, &name, &plans),
                            )
                            .await
                            {
                                Ok(r) => r,
                                Err(_) => Err(read::ReadError::Timeout(settings.timeout)),
                            }
                            .map_err(|e| (e.metric_label(), e.to_string()))
                        };
                        let outcome = match got {
                            Ok(figures) => {
                                ctx.metrics.backlog_read("ok", started.elapsed());
                                tracing::debug!(manager = %name, namespace = %ns, ?figures, "backlog read");
                                ctx.metrics.set_backlog(&ns, &name, &figures);
                                book.put(&ns, &name, Instant::now(), figures);
                                Ok(())
                            }
                            Err((label, e)) => {
                                ctx.metrics.backlog_read(label, started.elapsed());
                                Err(e)
                            }
                        };
                        (m, ns, name, outcome)
                    }
                })
                .buffer_unordered(READERS)
                .collect()
                .await;
        for (m, ns, name, outcome) in results {
            let now_says = match &outcome {
                Ok(()) => (true, "read from JetStream".to_owned()),
                Err(e) => (false, e.clone()),
            };
            let key = (ns.clone(), name.clone());
            if said.get(&key) == Some(&now_says) {
                continue;
            }
            if let Err(e) = &outcome {
                tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not read the durable backlog");
            }
            if write_condition(&ctx, &m, &ns, &name, &now_says).await {
                said.insert(key, now_says);
            }
        }
    }
    // A replica that stopped reading (it lost the Lease, or is stopping) shows no figures: only
    // the reading leader's count.
    ctx.metrics.retain_backlogs(&HashSet::new());
}

async fn connect(
    url: &str,
    tls: Option<rustls::ClientConfig>,
) -> Result<async_nats::Client, String> {
    let addrs = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut options = async_nats::ConnectOptions::new();
    if let Some(tls) = tls {
        options = options.tls_client_config(tls);
    }
    options
        .name("switchyard-operator")
        // Replies come under the one prefix the operator's NATS user may read.
        .custom_inbox_prefix(switchyard_protocol::nats_access::OPERATOR_INBOX)
        .connection_timeout(CONNECT_TIMEOUT)
        // Connects (and reconnects) in the background: a server down at start is an error in the
        // Managers' conditions, not a stuck operator.
        .retry_on_initial_connect()
        .connect(addrs.as_slice())
        .await
        .map_err(|e| e.to_string())
}

/// The `BacklogRead` condition of `m` for `(ok, message)` (pure).
pub(crate) fn condition(m: &Manager, ok: bool, message: &str, now: Time) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last = m
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == BACKLOG_READ && c.status == status)
        })
        .map_or(now, |c| c.last_transition_time.clone());
    Condition {
        type_: BACKLOG_READ.into(),
        status: status.into(),
        reason: if ok { "Read" } else { "ReadFailed" }.into(),
        message: message.to_owned(),
        observed_generation: m.metadata.generation,
        last_transition_time: last,
    }
}

/// Applies the `BacklogRead` condition; false when the write failed (it is tried again next read).
async fn write_condition(
    ctx: &Context,
    m: &Manager,
    ns: &str,
    name: &str,
    (ok, message): &(bool, String),
) -> bool {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = serde_json::json!({ "conditions": [condition(m, *ok, message, now)] });
    match apply_status(ctx, ns, name, status).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not write the BacklogRead condition");
            false
        }
    }
}

/// Applies `status` to Manager `ns/name` under the backlog reader's field manager: what it sent
/// before and leaves out now is dropped.
async fn apply_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    status: serde_json::Value,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({
        "apiVersion": <Manager as kube::Resource>::api_version(&()),
        "kind": <Manager as kube::Resource>::kind(&()),
        "status": status,
    });
    Api::<Manager>::namespaced(ctx.client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

/// Removes the `BacklogRead` condition: an apply under its field manager that no longer names it
/// (server-side apply drops the fields a manager stops sending and no other one owns).
async fn clear_condition(ctx: &Context, ns: &str, name: &str) {
    match apply_status(ctx, ns, name, serde_json::json!({})).await {
        Ok(()) => {
            tracing::info!(manager = %name, namespace = %ns, "backlog no longer read; BacklogRead condition removed");
        }
        Err(e) => {
            tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not remove the BacklogRead condition");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_age_out_after_three_intervals() {
        let book = Backlogs::new(Duration::from_secs(2));
        let t0 = Instant::now();
        book.put("shop", "orders", t0, BTreeMap::from([("a".to_owned(), 12)]));
        let key = ("shop".to_owned(), "orders".to_owned(), "a".to_owned());
        assert_eq!(book.fresh(t0 + Duration::from_secs(6)).get(&key), Some(&12));
        assert!(book.fresh(t0 + Duration::from_secs(7)).is_empty());
        book.retain(&HashSet::new());
        assert!(book.fresh(t0).is_empty());
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut m: Manager = serde_saphyr::from_str(
            "apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: orders, namespace: shop, generation: 4}
spec:
  routerRef: {name: shop}
  events: [a]
  app: {port: 8080}
  template: {spec: {containers: [{name: app, image: app}]}}
",
        )
        .expect("manager");
        let t = |s| Time(k8s_openapi::jiff::Timestamp::from_second(s).expect("time"));
        let c = condition(&m, false, "no answer", t(10));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.observed_generation),
            ("False", "ReadFailed", Some(4))
        );
        m.status = Some(switchyard_crds::status::ManagerStatus {
            conditions: vec![c],
            ..Default::default()
        });
        assert_eq!(
            condition(&m, false, "other", t(20)).last_transition_time,
            t(10)
        );
        let ok = condition(&m, true, "read from JetStream", t(30));
        assert_eq!(
            (ok.reason.as_str(), ok.last_transition_time),
            ("Read", t(30))
        );
        // Not durable: not read, and the condition it still carries is one to remove.
        assert!(!is_read(&m) && carries_condition(&m));
        m.status = None;
        assert!(!carries_condition(&m));
    }
}
