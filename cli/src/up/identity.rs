//! Mesh identity of a local run: an ephemeral CA made for this run, a token per sidecar in a private
//! file, and the same `Identity` service the operator serves in a cluster on a loopback port. Each
//! sidecar certifies itself through it, so local runs take the cluster's mTLS path, on by default.

use super::plan::ProcSpec;
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use switchyard_identity::local::{LOCAL_TRUST_DOMAIN, LocalIdentity, Running};
use switchyard_identity::service::{DEFAULT_LIFETIME, Quiet};
use switchyard_protocol::env;

/// Makes the CA and a token per sidecar of `procs` (files under `dir`, readable by this user only),
/// and adds each sidecar's identity environment except the service URL (known once it listens).
/// With a JetStream server among `procs`, also its certificate and key, which its configuration
/// names (`plan::NATS_CERT`, `plan::NATS_KEY`).
pub fn prepare(procs: &mut [ProcSpec], dir: &Path) -> anyhow::Result<LocalIdentity> {
    let mut local = LocalIdentity::new(LOCAL_TRUST_DOMAIN).context("making the mesh CA")?;
    let trust = dir.join(super::plan::TRUST_FILE);
    super::write_private(&trust, local.trust_pem().as_bytes())
        .with_context(|| trust.display().to_string())?;
    if procs.iter().any(|p| p.tier == super::plan::Tier::Store) {
        // As long as the run's CA may last: nats-server reads the files once, at start.
        let server = local
            .jetstream_server(NATS_CERT_LIFETIME)
            .context("certifying the JetStream server")?;
        for (name, pem) in [
            (super::plan::NATS_CERT, &server.chain),
            (super::plan::NATS_KEY, &server.key),
        ] {
            let file = dir.join(name);
            super::write_private(&file, pem.as_bytes())
                .with_context(|| file.display().to_string())?;
        }
    }
    for (i, p) in procs.iter_mut().enumerate() {
        let Some(w) = &p.identity else { continue };
        let token = local
            .token(w.kind, &w.namespace, &w.name, &p.label.replace(' ', "-"))
            .with_context(|| format!("{}: a mesh identity", p.label))?;
        let file = dir.join(format!("sidecar-{i}.token"));
        super::write_private(&file, token.as_bytes())
            .with_context(|| file.display().to_string())?;
        p.env
            .push((env::IDENTITY_TOKEN_FILE.into(), file.display().to_string()));
        p.env
            .push((env::IDENTITY_TRUST_FILE.into(), trust.display().to_string()));
    }
    Ok(local)
}

/// Lifetime of the local JetStream server's certificate: a year, as a local run never renews it.
const NATS_CERT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Starts the service on a free loopback port and points every sidecar of `procs` at it.
pub async fn serve(local: LocalIdentity, procs: &mut [ProcSpec]) -> anyhow::Result<Running> {
    let running = local
        .serve("127.0.0.1:0".parse()?, lifetime()?, Arc::new(Quiet))
        .await
        .context("starting the local identity service")?;
    for p in procs.iter_mut().filter(|p| p.identity.is_some()) {
        p.env.push((env::IDENTITY.into(), running.url.clone()));
    }
    Ok(running)
}

/// Certificate lifetime: 24 h, or `SWITCHYARD_CERT_LIFETIME` (e.g. `30s`, to watch renewals).
fn lifetime() -> anyhow::Result<Duration> {
    match std::env::var("SWITCHYARD_CERT_LIFETIME") {
        Ok(v) if !v.is_empty() => humantime::parse_duration(&v).with_context(|| {
            format!("SWITCHYARD_CERT_LIFETIME={v:?} is not a duration like 30s or 24h")
        }),
        _ => Ok(DEFAULT_LIFETIME),
    }
}
