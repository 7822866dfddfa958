//! CA rotation against the real API server (issue 38, item 3): two operator replicas with mesh
//! TLS, under the chart's RBAC (`src/mesh_release.rs`), follow a staged rotation of their CA Secret
//! with no restart. The Secret starts as the self-signed root the first replica made
//! (`switchyard-ca`); the test then (1) adds a new root to `ca.crt`, (2) replaces `tls.crt` and
//! `tls.key` with an issuer under the new root (as cert-manager keeps one), (3) removes the old root.
//! After each write, both replicas' `Identity.Trust` answers must show it (anchors, signer); at the
//! end both serve a certificate that verifies under the new root alone, the same processes still
//! run, and the rotation metrics count it. Deleting the Secret then gets it written back with the
//! CA in use, not a new one.
//!
//! Every Router and Manager carries the `MeshTrust` condition the leader writes: `Valid` naming
//! the anchor's and the issuer's ends, rewritten when the issuer changes, and `ExpiresSoon` once
//! an issuer with less than 30 days left signs.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use rustls_pki_types::CertificateDer;
use std::time::SystemTime;
use switchyard_crds::status::MESH_TRUST;
use switchyard_crds::{Manager, Router};
use switchyard_e2e::ca_secret::{issuer_for, write};
use switchyard_e2e::identity::channel;
use switchyard_e2e::mesh_release::{CA_SECRET, MeshRelease, NAMESPACE};
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::{
    Operator, OperatorOpts, Replicas, TestNamespace, cluster, eventually, fixtures, timeout,
};
use switchyard_identity::ca::{Ca, CaPem};
use switchyard_identity::pem;
use switchyard_protocol::control::v1::TrustRequest;
use switchyard_protocol::control::v1::identity_client::IdentityClient;

/// An issuer under `root`, valid for ninety days: certificate and key, PEM.
fn intermediate(root: &CaPem) -> Result<(String, String)> {
    // Ninety days, as a cert-manager issuer: shorter-lived than the root (the expiry gauges differ).
    issuer_for(root, 90)
}

fn ders(text: &str) -> Result<Vec<CertificateDer<'static>>> {
    pem::parse_certs(text.as_bytes()).map_err(|e| anyhow::anyhow!("PEM: {e}"))
}

/// What replica `op` trusts and signs with now, asked as a sidecar asks (`Identity.Trust`), the
/// server checked against `verify` (anchors only).
async fn trust_of(
    op: &Operator,
    verify: &[CertificateDer<'static>],
) -> Result<(Vec<Vec<u8>>, Vec<u8>)> {
    let ch = channel(&op.identity_url(), verify, None).await?;
    let reply = IdentityClient::new(ch)
        .trust(TrustRequest {})
        .await
        .with_context(|| format!("Identity.Trust of {}", op.identity))?
        .into_inner();
    Ok((reply.anchors, reply.signer))
}

/// Waits until both replicas answer `anchors` and, when given, `signer`.
async fn both_show(
    ops: &Replicas,
    what: &str,
    verify: &[CertificateDer<'static>],
    anchors: &[CertificateDer<'static>],
    signer: Option<&CertificateDer<'static>>,
) -> Result<()> {
    let want: Vec<Vec<u8>> = anchors.iter().map(|c| c.to_vec()).collect();
    eventually(what, timeout(), || async {
        for op in [&ops.leader, &ops.standby] {
            let (got, signs) = trust_of(op, verify).await?;
            ensure!(got == want, "{} trusts {} anchors", op.identity, got.len());
            if let Some(s) = signer {
                ensure!(
                    signs == s.to_vec(),
                    "{} signs with another issuer",
                    op.identity
                );
            }
        }
        Ok(())
    })
    .await
}

/// The `MeshTrust` condition of Router `edge` and Manager `orders` in `ns`: (status, reason,
/// message) of each, once both carry it.
async fn trust_conditions(
    client: &kube::Client,
    ns: &str,
) -> Result<[(String, String, String); 2]> {
    let said = |c: Option<&Condition>| {
        c.map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .context("no MeshTrust condition yet")
    };
    let router = Api::<Router>::namespaced(client.clone(), ns)
        .get("edge")
        .await?;
    let manager = Api::<Manager>::namespaced(client.clone(), ns)
        .get("orders")
        .await?;
    let of = |conditions: Option<&Vec<Condition>>| {
        said(conditions.and_then(|cs| cs.iter().find(|c| c.type_ == MESH_TRUST)))
    };
    Ok([
        of(router.status.as_ref().map(|s| &s.conditions))?,
        of(manager.status.as_ref().map(|s| &s.conditions))?,
    ])
}

/// Waits until both objects' `MeshTrust` conditions have `reason` and a message with `needle`.
async fn trust_says(client: &kube::Client, ns: &str, reason: &str, needle: &str) -> Result<()> {
    eventually(
        &format!("MeshTrust {reason} with `{needle}` on the Router and the Manager"),
        timeout(),
        || async {
            for (status, why, message) in trust_conditions(client, ns).await? {
                ensure!(
                    why == reason && message.contains(needle),
                    "MeshTrust {status} {why}: {message}"
                );
                ensure!(status == if reason == "Valid" { "True" } else { "False" });
            }
            Ok(())
        },
    )
    .await
}

/// `t`'s date as the condition writes it (RFC 3339, to the second).
fn date_of(cert: &CertificateDer<'_>) -> Result<String> {
    let end = switchyard_identity::trust::not_after(cert).context("no end of validity")?;
    let secs = switchyard_identity::trust::epoch_seconds(end);
    Ok(k8s_openapi::jiff::Timestamp::from_second(secs)?.to_string())
}

async fn rotate(c: &switchyard_e2e::Cluster, ops: &mut Replicas) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(c.client().await?, NAMESPACE);
    let made = secrets
        .get(CA_SECRET)
        .await
        .context("the CA Secret the operator made")?;
    let text = |k: &str| {
        made.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .with_context(|| format!("{CA_SECRET} has no {k}"))
    };
    let r1_pem = text("tls.crt")?;
    let r1 = ders(&r1_pem)?;
    let (_, r2) = Ca::generate("cluster.local", SystemTime::now())?;
    let r2_der = ders(&r2.cert)?;
    let (i2_pem, i2_key) = intermediate(&r2)?;
    let i2 = ders(&i2_pem)?;
    let both_roots = [r1.clone(), r2_der.clone()].concat();
    let pids = (ops.leader.pid(), ops.standby.pid());
    // A Router and a Manager: the leader writes their MeshTrust condition (no pod needs to run).
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "trust").await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router_routing("edge", &["orders.created"]),
        fixtures::manager("orders", "edge", "[orders.created]", ""),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    trust_says(
        &client,
        &ns.name,
        "Valid",
        &format!("issuer until {}", date_of(&r1[0])?),
    )
    .await?;
    both_show(
        ops,
        "both replicas on the CA they made",
        &r1,
        &r1,
        Some(&r1[0]),
    )
    .await?;

    // 1. The new root joins the bundle.
    let bundle = format!("{r1_pem}{}", r2.cert);
    write(&secrets, CA_SECRET, &[("ca.crt", &bundle)]).await?;
    both_show(
        ops,
        "both replicas trust both roots",
        &both_roots,
        &both_roots,
        Some(&r1[0]),
    )
    .await?;

    // 2. The issuer is re-issued under the new root (announced, signing after 2 s).
    write(
        &secrets,
        CA_SECRET,
        &[("tls.crt", &i2_pem), ("tls.key", &i2_key)],
    )
    .await?;
    both_show(
        ops,
        "both replicas sign with the new issuer",
        &both_roots,
        &both_roots,
        Some(&i2[0]),
    )
    .await?;

    // 3. The old root leaves; each replica's own certificate now verifies under the new root alone.
    write(&secrets, CA_SECRET, &[("ca.crt", &r2.cert)]).await?;
    both_show(
        ops,
        "both replicas trust the new root only",
        &r2_der,
        &r2_der,
        Some(&i2[0]),
    )
    .await?;

    ensure!(
        ops.leader.is_running() && ops.standby.is_running(),
        "a replica exited during the rotation"
    );
    ensure!(
        (ops.leader.pid(), ops.standby.pid()) == pids,
        "a replica was restarted"
    );
    for op in [&ops.leader, &ops.standby] {
        let m = op.metrics().await?;
        let anchors = m.sum_where(
            "switchyard_operator_mesh_ca_rotations_total",
            "change",
            "anchors",
        );
        let switched = m.sum_where(
            "switchyard_operator_mesh_ca_rotations_total",
            "change",
            "switched",
        );
        ensure!(
            anchors >= 2.0 && switched >= 1.0,
            "{}: rotations counted anchors {anchors}, switched {switched}",
            op.identity
        );
        let issuer = m
            .value("switchyard_operator_mesh_issuer_expiry_seconds")
            .unwrap_or(0.0);
        let anchor = m
            .value("switchyard_operator_mesh_anchor_expiry_seconds")
            .unwrap_or(0.0);
        ensure!(
            issuer > 0.0 && anchor > issuer,
            "{}: expiry gauges anchor {anchor}, issuer {issuer}",
            op.identity
        );
        eprintln!(
            "[e2e] {}: rotations anchors {anchors}, switched {switched}; issuer expires {issuer}, anchor {anchor}",
            op.identity
        );
    }

    // A deleted Secret is written back with the CA in use, not a new one.
    secrets
        .delete(CA_SECRET, &Default::default())
        .await
        .context("deleting the CA Secret")?;
    eventually(
        "the CA Secret written back with the issuer in use",
        timeout(),
        || async {
            let s = secrets.get_opt(CA_SECRET).await?.context("not back yet")?;
            let crt = s
                .data
                .as_ref()
                .and_then(|d| d.get("tls.crt"))
                .context("no tls.crt")?;
            ensure!(
                ders(&String::from_utf8_lossy(&crt.0))?[0] == i2[0],
                "another issuer"
            );
            Ok(())
        },
    )
    .await?;
    both_show(
        ops,
        "both replicas still on the new issuer",
        &r2_der,
        &r2_der,
        Some(&i2[0]),
    )
    .await?;
    trust_says(
        &client,
        &ns.name,
        "Valid",
        &format!("issuer until {}", date_of(&i2[0])?),
    )
    .await?;

    // An issuer with 20 days left: every object says so, naming its end.
    let (i3_pem, i3_key) = issuer_for(&r2, 20)?;
    let i3 = ders(&i3_pem)?;
    write(
        &secrets,
        CA_SECRET,
        &[("tls.crt", &i3_pem), ("tls.key", &i3_key)],
    )
    .await?;
    let soon = format!("the mesh issuer expires at {}", date_of(&i3[0])?);
    trust_says(&client, &ns.name, "ExpiresSoon", &soon).await?;
    eprintln!(
        "[e2e] MeshTrust: {:?}",
        trust_conditions(&client, &ns.name).await?
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_replicas_follow_a_staged_rotation_of_the_ca_secret_without_a_restart() -> Result<()> {
    let lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let release = MeshRelease::install(c, &lock).await?;
    let cp_port = free_port()?;
    let base = OperatorOpts {
        mesh_tls: true,
        run_as: release.run_as(),
        control_plane_port: Some(cp_port),
        // With mesh TLS on, the operator refuses to start without the URL its sidecars certify at.
        extra_args: vec![
            "--issuer-activation-delay=2s".into(),
            format!("--control-plane-url=https://127.0.0.1:{cp_port}"),
        ],
        ..OperatorOpts::new("e2e-rotate")
    };
    let mut ops = match Replicas::start_with(c, "e2e-rotate", base).await {
        Ok(ops) => ops,
        Err(e) => {
            let _ = release.uninstall(c).await;
            return Err(e);
        }
    };
    let checked = rotate(c, &mut ops).await;
    let tails = ops.log_tails(60);
    let stopped = ops.stop().await;
    let uninstalled = release.uninstall(c).await;
    if let Err(e) = checked {
        bail!("{e:#}\n{tails}");
    }
    stopped?;
    uninstalled
}
