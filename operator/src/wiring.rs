//! The operator's tasks wired together, as the binary runs them: admin and probe servers, the mesh
//! identity, the control plane, leader election, then (on the leader) the controllers, the
//! autoscaler, the backlog reader and the JetStream access writer; a clean stop on a signal.

use crate::admin::{self, Admin};
use crate::context::Context;
use crate::identity::ca_secret::DEFAULT_SECRET;
use crate::identity::{self, IdentitySettings, MeshIdentity};
use crate::leader::store::KubeLease;
use crate::leader::view::LeaderView;
use crate::leader::{self, LeaseConfig};
use crate::metrics::Metrics;
use crate::render::RenderSettings;
use crate::render::identity::{MeshRender, TrustBundle};
use crate::settings::{self, Settings};
use crate::{autoscale, backlog, conn, control_plane, controller, nats_access};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use switchyard_identity::limit::ConnLimiter;
use tokio::sync::watch;

/// Runs the operator until a signal (success) or lost leadership (failure, so the pod restarts as a
/// fresh candidate).
pub async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    settings.check_mesh()?;
    if let Some(url) = &settings.control_plane_url {
        settings::check_control_plane_url(settings::CONTROL_PLANE_URL, url, settings.mesh_tls)?;
    }
    let peer_url = settings.peer_url()?;
    let identity_url = settings.identity_url()?;
    if settings.leader_election && peer_url.is_none() {
        tracing::warn!(
            "no --peer-url (nor POD_IP): while this replica leads, standbys cannot forward load reports and activations to it"
        );
    }
    let client = kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no Kubernetes client configuration (KUBECONFIG or in-cluster): {e}")
    })?;
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));

    let admin = Admin {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let servers = [
        (
            "admin",
            "--metrics-addr",
            settings.metrics_addr,
            admin::router(admin.clone()),
            conn::ADMIN,
        ),
        (
            "probes",
            "--probe-addr",
            settings.probe_addr,
            admin::probes(admin),
            conn::PROBES,
        ),
    ];
    for (name, flag, addr, app, limits) in servers {
        let listener = switchyard_identity::incoming::bind(addr)
            .map_err(|e| anyhow::anyhow!("{flag} {addr}: {e}"))?;
        let metrics = metrics.clone();
        tokio::spawn(conn::http::serve(
            listener,
            app,
            ConnLimiter::new(limits),
            move |reason| metrics.connection_refused(name, reason),
        ));
    }

    let version = client
        .apiserver_version()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the API server: {e}"))?;
    tracing::info!(server = %version.git_version, addr = %settings.metrics_addr, "connected");

    // Every replica holds the CA (the first one makes the Secret, the others read it): each serves
    // the Identity service and the control plane with a certificate of its own.
    let mesh = if settings.mesh_tls {
        let identity = MeshIdentity::start(
            &client,
            IdentitySettings {
                trust_domain: settings.trust_domain.clone(),
                ca_secret: match &settings.ca_secret {
                    Some(name) => (name.clone(), true),
                    None => (DEFAULT_SECRET.to_owned(), false),
                },
                namespace: settings.lease_namespace.clone(),
                pod: settings.identity(),
                lifetime: settings.cert_lifetime,
                activation_delay: settings.issuer_activation_delay,
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("mesh identity: {e}"))?;
        tokio::spawn(identity.clone().renew_forever());
        // Every replica follows the CA Secret (not only the leader): each signs and serves TLS.
        tokio::spawn(identity::rotation::run(
            client.clone(),
            identity.clone(),
            metrics.clone(),
            futures::future::pending::<()>(),
        ));
        tokio::spawn(identity::gone_pods::run(client.clone(), identity.clone()));
        if settings.jetstream_insecure {
            tracing::warn!(
                "--jetstream-insecure: durable events travel to JetStream in the clear, and any pod that reaches it can read, publish or delete them"
            );
        }
        Some(identity)
    } else {
        tracing::warn!(
            "mesh TLS is off (--mesh-tls=false): internal hops are plain TCP, the control plane h2c"
        );
        None
    };
    ready.store(true, Ordering::Relaxed);

    // One shutdown signal, cloned into every task that must stop: SIGTERM or Ctrl-C.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    let stopped = {
        let rx = stop_rx.clone();
        move || {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        }
    };

    // Every replica serves the control plane: routing tables come from its own caches, so sidecars
    // spread over all replicas; a standby forwards load reports and activations to the leader.
    // A large backlog: after a restart or a failover every sidecar resubscribes at once.
    let cp_listener =
        switchyard_identity::incoming::bind(settings.control_plane_addr).map_err(|e| {
            anyhow::anyhow!("--control-plane-addr {}: {e}", settings.control_plane_addr)
        })?;
    tracing::info!(addr = %settings.control_plane_addr, "control plane listening");
    let loads = Arc::new(control_plane::load::LoadBook::default());
    let serving = match &mesh {
        None => None,
        Some(m) => Some(control_plane::MeshServing {
            config: m
                .server_config()
                .map_err(|e| anyhow::anyhow!("control-plane TLS: {e}"))?,
            identity_config: m
                .identity_server_config()
                .map_err(|e| anyhow::anyhow!("Identity service TLS: {e}"))?,
            identity_listener: switchyard_identity::incoming::bind(settings.identity_addr)
                .map_err(|e| anyhow::anyhow!("--identity-addr {}: {e}", settings.identity_addr))?,
            forward: m
                .forward_connector()
                .map_err(|e| anyhow::anyhow!("TLS to the leader: {e}"))?,
            identity: m.service(
                client.clone(),
                metrics.clone(),
                settings.watch_namespaces.clone(),
            ),
        }),
    };
    let view = Arc::new(if settings.leader_election {
        LeaderView::default()
    } else {
        LeaderView::me()
    });
    tracing::info!(scope = %settings.watch_namespaces, "watching");
    let observer = control_plane::observe::start(client.clone(), &settings.watch_namespaces);
    let caches = observer.caches();
    let control_plane = tokio::spawn(control_plane::serve(
        observer,
        cp_listener,
        loads.clone(),
        view.clone(),
        metrics.clone(),
        serving,
        stopped(),
    ));

    let identity = settings.identity();
    let lease = LeaseConfig {
        url: peer_url,
        ..LeaseConfig::new(
            settings.lease_name.clone(),
            settings.lease_namespace.clone(),
            identity.clone(),
        )
    };
    let store = Arc::new(KubeLease {
        api: kube::Api::namespaced(client.clone(), &settings.lease_namespace),
        name: settings.lease_name.clone(),
    });
    let mut since = tokio::time::Instant::now();
    if settings.leader_election {
        tokio::select! {
            t = leader::acquire(&*store, &lease, &metrics, &view) => since = t,
            () = stopped() => return Ok(ExitCode::SUCCESS),
        }
    } else {
        metrics.set_leader(true);
    }

    let ctx = Arc::new(
        Context::new(
            client.clone(),
            metrics.clone(),
            RenderSettings {
                sidecar_image: settings.sidecar_image.clone(),
                control_plane_url: settings.control_plane_url.clone(),
                mesh: mesh.as_ref().zip(identity_url).map(|(m, url)| {
                    let m = m.clone();
                    MeshRender {
                        identity_url: url,
                        trust_bundle: TrustBundle::live(move || m.trust_pem()),
                    }
                }),
                jetstream: settings.jetstream_url.as_ref().map(|url| {
                    switchyard_protocol::durable::JetStreamConfig {
                        url: url.clone(),
                        replicas: settings.jetstream_replicas,
                    }
                }),
            },
            identity,
            settings.watch_namespaces.clone(),
        )
        .with_rollouts_at_once(settings.sidecar_rollouts_at_once)
        .with_trust_changes(mesh.as_ref().map(|m| m.trust_changes())),
    );
    // Controllers stop on a shutdown signal or when leadership is lost; losing it exits non-zero so the
    // pod restarts as a fresh candidate rather than keeping stale caches.
    let (lost_tx, lost_rx) = watch::channel(false);
    if settings.leader_election {
        let (store, lease, metrics, view) =
            (store.clone(), lease.clone(), metrics.clone(), view.clone());
        tokio::spawn(async move {
            leader::hold(&*store, &lease, &metrics, &view, since).await;
            let _ = lost_tx.send(true);
        });
    }
    let end = {
        let stopped = stopped();
        let mut lost = lost_rx.clone();
        async move {
            tokio::select! {
                () = stopped => {}
                _ = lost.wait_for(|l| *l) => {}
            }
        }
    };
    let end = futures::future::FutureExt::shared(Box::pin(end));
    // The autoscaler writes replicas, so like the controllers it runs on the leader only; so does
    // the backlog reader that feeds it (one read of each consumer, not one per replica).
    let backlogs = settings
        .jetstream_url
        .as_ref()
        .map(|_| Arc::new(backlog::Backlogs::new(settings.backlog_interval)));
    let reading = {
        let (ctx, backlogs, end) = (ctx.clone(), backlogs.clone(), end.clone());
        let managers = caches.managers.clone();
        let url = settings.jetstream_url.clone();
        let (interval, timeout) = (settings.backlog_interval, settings.backlog_timeout);
        let tls = match mesh.as_ref().map(|m| m.jetstream_client()).transpose() {
            Ok(tls) => tls,
            Err(e) => anyhow::bail!("the operator's JetStream TLS: {e}"),
        };
        async move {
            if let (Some(book), Some(url)) = (backlogs, url) {
                let s = backlog::Settings {
                    url,
                    interval,
                    timeout,
                    tls,
                };
                backlog::run(ctx, book, managers, s, end).await;
            }
        }
    };
    // The chart's JetStream servers' certificate and users: written by the leader only.
    let access = {
        let (client, end) = (client.clone(), end.clone());
        let managers = caches.managers.clone();
        let target = mesh.clone().zip(
            settings
                .jetstream_access_secret
                .clone()
                .map(|s| (s, settings.jetstream_server_names.clone())),
        );
        async move {
            if let Some((identity, secret)) = target {
                nats_access::run(client, identity, managers, secret, end).await;
            }
        }
    };
    // The MeshTrust condition: on the leader, as every status write.
    let trust = {
        let (client, end, identity) = (client.clone(), end.clone(), mesh.clone());
        let (routers, managers) = (caches.routers.clone(), caches.managers.clone());
        async move {
            if let Some(identity) = identity {
                identity::condition::run(client, identity, routers, managers, end).await;
            }
        }
    };
    futures::join!(
        trust,
        access,
        controller::run(ctx.clone(), end.clone()),
        autoscale::run(ctx, loads, backlogs, caches.managers.clone(), end.clone()),
        reading
    );

    if *lost_rx.borrow() {
        return Ok(ExitCode::FAILURE);
    }
    if let Err(e) = control_plane.await {
        tracing::warn!(error = %e, "control plane task failed");
    }
    ready.store(false, Ordering::Relaxed);
    if settings.leader_election {
        leader::release(&*store, &lease).await;
    }
    tracing::info!("stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM or Ctrl-C.
async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
