//! NATS clients that present a mesh certificate, as a Manager's sidecar does: the chart's JetStream
//! servers take only mesh identities, each Manager's being the NATS user the operator wrote for it.
//! The tests issue such a certificate from the mesh CA (the release's CA Secret) to look at what the
//! servers hold, or to be refused.

use anyhow::Result;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use switchyard_identity::{Ca, CertStore, Kind, SpiffeId, Subject, tls};

/// The chart's default trust domain (`meshTLS.trustDomain`).
pub const TRUST_DOMAIN: &str = "cluster.local";

/// A certificate of Manager `name` in `namespace`, issued by `ca` as the Identity service would.
pub fn certified(ca: &Ca, namespace: &str, name: &str) -> Result<Arc<CertStore>> {
    let subject = Subject {
        id: SpiffeId::new(TRUST_DOMAIN, namespace, Kind::Manager, name)?,
        pod: format!("{name}-e2e"),
    };
    let (issued, key) = ca
        .issue_with_new_key(&subject, Duration::from_secs(3600), SystemTime::now())
        .map_err(|e| anyhow::anyhow!("issuing {name}'s certificate: {e}"))?;
    let store = Arc::new(CertStore::default());
    store.install(
        issued.chain,
        rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        issued.not_after,
    )?;
    Ok(store)
}

/// A NATS client presenting `store`'s certificate, trusting `ca`, replies under `inbox`; the
/// server's errors are collected in the returned list.
pub async fn connect(
    url: &str,
    ca: &Ca,
    store: Arc<CertStore>,
    inbox: &str,
) -> Result<(async_nats::Client, Arc<Mutex<Vec<String>>>)> {
    let config = tls::jetstream_client_config(store, tls::roots(ca.trust())?)?;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let client = async_nats::ConnectOptions::new()
        .tls_client_config(config)
        .require_tls(true)
        .custom_inbox_prefix(inbox)
        .connection_timeout(Duration::from_secs(3))
        .max_reconnects(Some(1))
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event
                    && let Ok(mut s) = seen.lock()
                {
                    s.push(e.to_string());
                }
            }
        })
        .connect(url)
        .await?;
    Ok((client, errors))
}
