//! OIDC auth: a Bearer JWT checked with the signing keys an OpenID Connect issuer publishes.
//!
//! The issuer's discovery document names its key set (JWKS); both are fetched over HTTPS
//! (`fetch.rs`), parsed (`keys.rs`) and cached. A background task fetches them again at the end of
//! their cache lifetime (`policy.rs`); a token naming a key the set lacks asks for an early fetch,
//! at most one per [`policy::EARLY_FETCH_INTERVAL`], which its request awaits for at most
//! [`policy::EARLY_FETCH_WAIT`] ([`Gate::prepare`]). A failed fetch keeps the keys at hand. A key
//! set that changed bumps [`Gate::changes`], so long sessions re-check their token, as they do
//! when the static JWT key is reloaded.
//!
//! A token's `iss` is read before any key is looked up, so tokens of another issuer are refused
//! by name and never cause a fetch.

mod fetch;
mod keys;
mod policy;

use super::gate::{Denial, Gate, Head, Token};
use super::jwt::{bearer, deny, describe, expired, expires};
use crate::config::{ConfigError, field_error};
use crate::secrets::Secrets;
use arc_swap::ArcSwapOption;
use base64::Engine as _;
use fetch::Fetcher;
use futures::future::BoxFuture;
use hyper::header::{AUTHORIZATION, HeaderName};
use jsonwebtoken::{Algorithm, Validation};
use keys::KeySet;
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};
use switchyard_crds::router::{MAX_JWT_LEEWAY, Oidc, OidcAlgorithm};
use tokio::sync::watch;

/// The keys at hand and the issuer they are for.
struct Cached {
    /// The issuer as its discovery document states it (what tokens carry in `iss`).
    issuer: String,
    keys: KeySet,
}

/// Why one fetch of the issuer's keys failed (logged; the keys at hand stay).
#[derive(Debug, thiserror::Error)]
enum KeysFetchError {
    /// A document could not be fetched.
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    /// A document fetched cannot be used.
    #[error(transparent)]
    Keys(#[from] keys::KeysError),
}

/// What the gate and its fetch task share.
struct Issuer {
    /// The configured issuer URL.
    url: String,
    algorithms: Vec<Algorithm>,
    fetcher: Fetcher,
    cached: ArcSwapOption<Cached>,
    early: Mutex<policy::EarlyFetches>,
    /// Whether a fetch is under way (one at a time).
    fetching: AtomicBool,
    /// Counts finished fetches, for requests awaiting one.
    fetched: watch::Sender<u64>,
    /// Counts key set changes, for sessions to re-check at.
    changes: watch::Sender<u64>,
}

/// The OIDC gate.
pub(super) struct OidcGate {
    issuer: Arc<Issuer>,
    audiences: Vec<String>,
    leeway: Duration,
    header: HeaderName,
}

fn algorithm(a: OidcAlgorithm) -> Algorithm {
    match a {
        OidcAlgorithm::RS256 => Algorithm::RS256,
        OidcAlgorithm::ES256 => Algorithm::ES256,
        OidcAlgorithm::EdDSA => Algorithm::EdDSA,
    }
}

impl OidcGate {
    /// Checks the spec, reads the CA file, and starts fetching the issuer's keys; `field` is the
    /// spec path of the `oidc` entry, for errors. Needs a Tokio runtime.
    pub(super) fn build(
        spec: &Oidc,
        secrets: &Secrets,
        field: &str,
    ) -> Result<Arc<OidcGate>, ConfigError> {
        let bad = |sub: &str, why: String| {
            field_error(&secrets.config_file, format!("{field}{sub}"), why)
        };
        if !spec.issuer.starts_with("https://") || spec.issuer.parse::<hyper::Uri>().is_err() {
            return Err(bad(
                ".issuer",
                format!("{:?} is not an https:// URL", spec.issuer),
            ));
        }
        if spec.audiences.is_empty() || spec.audiences.iter().any(String::is_empty) {
            return Err(bad(
                ".audiences",
                "list at least one audience, none blank".into(),
            ));
        }
        if spec.algorithms.is_empty() {
            return Err(bad(".algorithms", "list at least one algorithm".into()));
        }
        let leeway: Duration = spec.leeway.into();
        if leeway > MAX_JWT_LEEWAY {
            return Err(bad(
                ".leeway",
                format!(
                    "{} is more than the most allowed, {}",
                    humantime::format_duration(leeway),
                    humantime::format_duration(MAX_JWT_LEEWAY)
                ),
            ));
        }
        let ca = match &spec.ca_secret_ref {
            Some(r) => Some(
                secrets
                    .file(&format!("{field}.caSecretRef"), &r.name, &r.key)?
                    .1,
            ),
            None => None,
        };
        let tls = fetch::client_config(ca.as_deref())
            .map_err(|why| bad(".caSecretRef", why.to_string()))?;
        let issuer = Arc::new(Issuer {
            url: spec.issuer.clone(),
            algorithms: spec.algorithms.iter().copied().map(algorithm).collect(),
            fetcher: Fetcher::new(tls),
            cached: ArcSwapOption::empty(),
            early: Mutex::new(policy::EarlyFetches::default()),
            fetching: AtomicBool::new(false),
            fetched: watch::Sender::new(0),
            changes: watch::Sender::new(0),
        });
        tokio::spawn(keep_fresh(Arc::downgrade(&issuer)));
        Ok(Arc::new(OidcGate {
            issuer,
            audiences: spec.audiences.clone(),
            leeway,
            header: AUTHORIZATION,
        }))
    }
}

/// Fetches the keys now, then again at the end of each set's cache lifetime (sooner after a
/// failure), while the gate lives.
async fn keep_fresh(issuer: Weak<Issuer>) {
    loop {
        let Some(i) = issuer.upgrade() else {
            return;
        };
        let next = i.fetch().await.unwrap_or(policy::RETRY_AFTER_FAILURE);
        drop(i);
        tokio::time::sleep(next).await;
    }
}

impl Issuer {
    /// One fetch of the discovery document and the key set, unless one is under way (then `None`
    /// at once). Returns the new set's cache lifetime; a failure is logged and the keys at hand
    /// stay.
    async fn fetch(&self) -> Option<Duration> {
        if self.fetching.swap(true, Ordering::AcqRel) {
            return None;
        }
        let result = self.fetch_keys().await;
        self.fetching.store(false, Ordering::Release);
        let lifetime = match result {
            Ok((cached, lifetime)) => {
                let changed = self
                    .cached
                    .load()
                    .as_ref()
                    .is_none_or(|old| old.keys.ids() != cached.keys.ids());
                tracing::debug!(issuer = %self.url, keys = ?cached.keys.ids(), "fetched the OIDC issuer's keys");
                self.cached.store(Some(Arc::new(cached)));
                if changed {
                    self.changes.send_modify(|n| *n += 1);
                }
                Some(lifetime)
            }
            Err(why) => {
                tracing::warn!(issuer = %self.url, "could not fetch the OIDC issuer's keys (the keys at hand stay): {why}");
                None
            }
        };
        self.fetched.send_modify(|n| *n += 1);
        lifetime
    }

    async fn fetch_keys(&self) -> Result<(Cached, Duration), KeysFetchError> {
        let doc = self.fetcher.get(&keys::discovery_url(&self.url)).await?;
        let discovery = keys::parse_discovery(&doc.body, &self.url)?;
        let jwks = self.fetcher.get(&discovery.jwks_uri).await?;
        let set = keys::parse_jwks(&jwks.body, &self.algorithms)?;
        Ok((
            Cached {
                issuer: discovery.issuer,
                keys: set,
            },
            policy::lifetime(jwks.cache_control.as_deref()),
        ))
    }

    /// Starts an early fetch if the rate limit allows one; a future that resolves when the fetch
    /// under way (started now or before) ends, within [`policy::EARLY_FETCH_WAIT`]. `None` when
    /// no fetch is under way or allowed.
    fn early_fetch(self: &Arc<Self>) -> Option<BoxFuture<'static, ()>> {
        let mut done = self.fetched.subscribe();
        if !self.fetching.load(Ordering::Acquire) {
            let allowed = self
                .early
                .lock()
                .map(|mut e| e.try_start(Instant::now()))
                .unwrap_or(false);
            if !allowed {
                return None;
            }
            let me = self.clone();
            tokio::spawn(async move { me.fetch().await });
        }
        Some(Box::pin(async move {
            let _ = tokio::time::timeout(policy::EARLY_FETCH_WAIT, done.changed()).await;
        }))
    }
}

/// What is read of a token before its signature is checked: its header and its `iss` claim.
struct Peek {
    header: jsonwebtoken::Header,
    issuer: Option<String>,
}

/// The header and unverified `iss` of `token`, or `None` when it is not a well-formed JWT.
fn peek(token: &str) -> Option<Peek> {
    let header = jsonwebtoken::decode_header(token).ok()?;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: Map<String, Value> = serde_json::from_slice(&bytes).ok()?;
    let issuer = claims.get("iss").and_then(Value::as_str).map(str::to_owned);
    Some(Peek { header, issuer })
}

impl OidcGate {
    /// The token of a request, if it has one.
    fn token<'h>(&self, head: &'h Head<'_>) -> Option<&'h str> {
        head.headers
            .get(&self.header)
            .and_then(|v| bearer(v.as_bytes()))
    }

    /// Verifies a token; its claims and when it stops being accepted.
    pub(super) fn verify(&self, token: &str) -> Result<Token, Denial> {
        let Some(p) = peek(token) else {
            return Err(deny_oidc(
                "malformed",
                "the token is not a well-formed JWT".into(),
            ));
        };
        if !self.issuer.algorithms.contains(&p.header.alg) {
            let (reason, detail) = describe(&jsonwebtoken::errors::ErrorKind::InvalidAlgorithm);
            return Err(deny_oidc(reason, detail));
        }
        if !p
            .issuer
            .as_deref()
            .is_some_and(|i| keys::same_issuer(i, &self.issuer.url))
        {
            return Err(deny_oidc(
                "wrong_issuer",
                format!(
                    "the token issuer (iss) is not the accepted issuer {}",
                    self.issuer.url
                ),
            ));
        }
        let Some(cached) = self.issuer.cached.load_full() else {
            return Err(Denial {
                status: 503,
                retry_after: Some(policy::EARLY_FETCH_INTERVAL.as_secs()),
                ..deny_oidc(
                    "keys_unavailable",
                    "the issuer's signing keys have not been fetched yet".into(),
                )
            });
        };
        let Some(key) = cached.keys.find(p.header.kid.as_deref()) else {
            return Err(deny_oidc(
                "unknown_key",
                format!(
                    "the token's signing key (kid) is not in the issuer's key set, which is fetched again for an unknown key at most once per {}s",
                    policy::EARLY_FETCH_INTERVAL.as_secs()
                ),
            ));
        };
        if key.algorithm != p.header.alg {
            let (reason, detail) = describe(&jsonwebtoken::errors::ErrorKind::InvalidAlgorithm);
            return Err(deny_oidc(reason, detail));
        }
        let validation = self.validation(key.algorithm, &cached.issuer);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| {
                let (reason, detail) = describe(e.kind());
                deny_oidc(reason, detail)
            })?;
        let token = Token {
            expires: expires(&data.claims, validation.leeway),
            claims: data.claims,
        };
        // As the static-key gate: `exp` is checked to the instant, not the whole second.
        if SystemTime::now() >= token.expires {
            return Err(Denial {
                middleware: "oidc",
                ..expired()
            });
        }
        Ok(token)
    }

    /// The checks: the key's one algorithm, `exp` required, `nbf` when present, `iss` the issuer
    /// (as configured or as its discovery document states it), `aud` one of the audiences.
    fn validation(&self, alg: Algorithm, stated_issuer: &str) -> Validation {
        let mut v = Validation::new(alg);
        v.leeway = self.leeway.as_secs();
        v.validate_nbf = true;
        v.set_issuer(&[stated_issuer, self.issuer.url.as_str()]);
        v.set_audience(&self.audiences);
        v
    }
}

fn deny_oidc(reason: &'static str, detail: String) -> Denial {
    Denial {
        middleware: "oidc",
        ..deny(reason, detail)
    }
}

impl Gate for OidcGate {
    fn check(&self, head: &Head<'_>) -> Result<Option<Token>, Denial> {
        let Some(token) = self.token(head) else {
            return Err(deny_oidc(
                "missing",
                "the Authorization header with a Bearer token is missing".into(),
            ));
        };
        self.verify(token).map(Some)
    }

    fn prepare(&self, head: &Head<'_>) -> Option<BoxFuture<'static, ()>> {
        let p = peek(self.token(head)?)?;
        // A token the issuer did not sign, or of an algorithm not allowed, is refused whatever
        // the keys: it never causes a fetch.
        if !p
            .issuer
            .as_deref()
            .is_some_and(|i| keys::same_issuer(i, &self.issuer.url))
            || !self.issuer.algorithms.contains(&p.header.alg)
        {
            return None;
        }
        let known = self
            .issuer
            .cached
            .load()
            .as_ref()
            .is_some_and(|c| c.keys.find(p.header.kid.as_deref()).is_some());
        if known {
            return None;
        }
        self.issuer.early_fetch()
    }

    fn credential(&self) -> Option<&HeaderName> {
        Some(&self.header)
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.issuer.changes.subscribe())
    }
}

#[cfg(test)]
mod tests;
