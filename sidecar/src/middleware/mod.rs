//! Edge middleware from the Router spec, in spec order: CORS, auth (JWT, OIDC, API key) and rate
//! limit.
//!
//! Each entry is a tower layer around the HTTP service (so WebSocket upgrades pass through it too);
//! auth and rate limit also guard gRPC calls. `timing` and `bodyLimit` are applied by the listeners
//! themselves. Decisions are pure ([`Gate::check`], [`cors::Policy::decide`]); `layer.rs` is the
//! tower shell. With no middleware configured nothing here runs per request.
//!
//! An auth gate that admits a request leaves a [`Grant`] in its extensions: what a long session
//! (a WebSocket, a gRPC `Connect` stream) keeps of its credential, to end when it lapses.

mod api_key;
mod bucket;
pub(crate) mod cors;
mod gate;
mod grant;
mod jwt;
mod layer;
mod oidc;
pub(crate) mod rate_limit;

pub(crate) use gate::{Denial, Gate, Head};
pub(crate) use grant::Grant;

use crate::config::{ConfigError, field_error};
use crate::metrics::Metrics;
use crate::secrets::Secrets;
use crate::secrets::reload::Reloads;
use std::sync::Arc;
use switchyard_crds::router::RouterSpec;

/// One configured middleware step.
#[derive(Clone)]
pub(crate) enum Step {
    /// CORS: answers preflights, decorates responses.
    Cors(Arc<cors::Policy>),
    /// Auth or rate limit.
    Gate(Arc<dyn Gate>),
}

/// The configured steps, in spec order.
#[derive(Clone, Default)]
pub(crate) struct Stack {
    /// Every step, for HTTP.
    pub steps: Vec<Step>,
    /// The gates only, for gRPC (CORS means nothing there).
    pub gates: Vec<Arc<dyn Gate>>,
    /// Whether one of them checks JWTs (the JWT or the OIDC gate).
    jwt: bool,
}

impl Stack {
    /// Builds the steps of `spec.middleware`, reading keys through `secrets`; their files are
    /// added to `reloads`.
    pub(crate) fn build(
        spec: &RouterSpec,
        secrets: &Secrets,
        reloads: &mut Reloads,
    ) -> Result<Stack, ConfigError> {
        let mut stack = Stack::default();
        for (i, m) in spec.middleware.iter().enumerate() {
            let field = format!("spec.middleware[{i}]");
            if let Some(c) = &m.cors {
                let policy = cors::Policy::build(c, spec).map_err(|e| {
                    field_error(&secrets.config_file, format!("{field}.cors"), e.to_string())
                })?;
                stack.steps.push(Step::Cors(Arc::new(policy)));
            }
            let mut gate: Option<Arc<dyn Gate>> = None;
            if let Some(auth) = &m.auth {
                if let Some(j) = &auth.jwt {
                    stack.jwt = true;
                    gate = Some(jwt::JwtGate::build(
                        j,
                        secrets,
                        &format!("{field}.auth.jwt"),
                        reloads,
                    )?);
                } else if let Some(o) = &auth.oidc {
                    stack.jwt = true;
                    gate = Some(oidc::OidcGate::build(
                        o,
                        secrets,
                        &format!("{field}.auth.oidc"),
                    )?);
                } else if let Some(k) = &auth.api_key {
                    gate = Some(api_key::ApiKeyGate::build(
                        k,
                        secrets,
                        &format!("{field}.auth.apiKey"),
                        reloads,
                    )?);
                }
            }
            if let Some(r) = &m.rate_limit {
                let limiter = rate_limit::Limiter::build(r).map_err(|(sub, msg)| {
                    field_error(&secrets.config_file, format!("{field}.rateLimit{sub}"), msg)
                })?;
                gate = Some(Arc::new(limiter));
            }
            if let Some(g) = gate {
                stack.steps.push(Step::Gate(g.clone()));
                stack.gates.push(g);
            }
        }
        Ok(stack)
    }

    /// Runs the gates in order (gRPC); the first refusal is counted and returned. Admitted, the
    /// credential's grant when an auth gate checked one.
    pub(crate) fn admit(
        &self,
        head: &Head<'_>,
        metrics: &Metrics,
    ) -> Result<Option<Grant>, Denial> {
        let mut grant = None;
        for g in &self.gates {
            match g.check(head) {
                Err(d) => {
                    metrics.rejected(d.middleware, d.reason);
                    return Err(d);
                }
                Ok(token) => {
                    if let Some(gr) = Grant::of(g, head, token) {
                        grant = Some(gr);
                    }
                }
            }
        }
        Ok(grant)
    }

    /// Work the gates need done before they decide on a request (see [`Gate::prepare`]), all of
    /// it together; `None` when there is none.
    pub(crate) fn prepare(
        &self,
        head: &Head<'_>,
    ) -> Option<futures::future::BoxFuture<'static, ()>> {
        let waits: Vec<_> = self.gates.iter().filter_map(|g| g.prepare(head)).collect();
        if waits.is_empty() {
            return None;
        }
        Some(Box::pin(async move {
            futures::future::join_all(waits).await;
        }))
    }

    /// Whether an auth gate checks JWTs (subscribe rules with scopes or claims need one).
    pub(crate) fn has_jwt(&self) -> bool {
        self.jwt
    }
}
