//! JetStream behind the mesh's identity, for the chart's NATS servers: the leader keeps one Secret
//! in its namespace with the servers' certificate from the mesh CA (renewed at two thirds of its
//! life), the trust bundle, and one NATS user per Manager whose sidecars use JetStream, with the
//! permissions its Router's table allows (`users`). The servers map each client certificate's
//! SPIFFE URI to its user (`verify_and_map`); a reloader beside them signals nats-server when the
//! kubelet updates the mounted Secret, so Managers come and go without a server restart.
//!
//! `users` and `secret` are pure; [`run`] is the loop that applies them.

mod secret;
mod users;

pub use secret::{ACCESS_KEY, CERT_KEY, KEY_KEY, ServerCert, TRUST_KEY, issue};
pub use users::{Users, users};

use crate::identity::MeshIdentity;
use crate::scope::Stores;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_crds::Manager;
use switchyard_protocol::nats_access::authorization_block;

/// How often the users are recomputed from the Manager cache (and written when they changed): a
/// new Manager's sidecars wait at most this, plus the kubelet's update of the mounted Secret.
const EVERY: Duration = Duration::from_secs(1);

/// Keeps Secret `name` in the operator's namespace current until `shutdown`: on the leader only,
/// since every write of a new certificate re-keys the servers. The certificate names the servers'
/// route hosts `server_names` besides their SPIFFE identity.
pub(crate) async fn run(
    client: kube::Client,
    identity: Arc<MeshIdentity>,
    managers: Stores<Manager>,
    (name, server_names): (String, Vec<String>),
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => return,
        ready = managers.wait_until_ready() => if ready.is_err() { return },
    }
    let namespace = identity.settings.namespace.clone();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut cert = match api.get_opt(&name).await {
        Ok(Some(s)) => {
            secret::reusable(&s, &identity.trust_pem(), &server_names, SystemTime::now())
        }
        _ => None,
    };
    // What was last written (block and certificate), so an unchanged state is not re-applied.
    let mut written: Option<(String, String)> = None;
    let mut refused_said: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(secret = %name, %namespace, "keeping the JetStream servers' certificate and users");
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        let trust = identity.trust_pem();
        let now = SystemTime::now();
        let current = match cert.take().filter(|c| c.renew_at > now) {
            Some(c) => c,
            None => match secret::issue(
                &identity.ca(),
                &identity.settings.trust_domain,
                &namespace,
                &server_names,
                identity.settings.lifetime,
                now,
            ) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "the JetStream servers' certificate could not be issued");
                    continue;
                }
            },
        };
        let state = managers.state();
        let u = users(
            state.iter().map(|m| &**m),
            &identity.settings.trust_domain,
            identity.operator_id(),
        );
        if u.refused != refused_said {
            for r in &u.refused {
                tracing::warn!(manager = %r, "no JetStream user: its durable events cannot be stored or pulled");
            }
            refused_said = u.refused.clone();
        }
        let access = authorization_block(&u.users);
        let key = (access, current.chain.clone());
        if written.as_ref() != Some(&key) {
            let obj = secret::secret(&namespace, &name, &current, &trust, &key.0);
            match crate::apply::apply(&client, &obj).await {
                Ok(_) => {
                    tracing::info!(secret = %name, users = u.users.len(), "JetStream users and certificate written");
                    written = Some(key);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the JetStream access Secret could not be written; trying again")
                }
            }
        }
        cert = Some(current);
    }
}
