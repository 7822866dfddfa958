//! Edge middleware from the Router spec, in spec order: CORS, auth (JWT, API key) and rate limit.
//!
//! Each entry is a tower layer around the HTTP service (so WebSocket upgrades pass through it too);
//! auth and rate limit also guard gRPC calls. `timing` and `bodyLimit` are applied by the listeners
//! themselves. Decisions are pure ([`Gate::check`], [`cors::Policy::decide`]); `layer.rs` is the
//! tower shell. With no middleware configured nothing here runs per request.

mod api_key;
mod bucket;
pub(crate) mod cors;
mod jwt;
mod layer;
mod rate_limit;

use crate::answer::Answer;
use crate::config::{ConfigError, field_error};
use crate::metrics::Metrics;
use crate::secrets::Secrets;
use hyper::HeaderMap;
use hyper::header::HeaderValue;
use std::net::IpAddr;
use std::sync::Arc;
use switchyard_crds::router::RouterSpec;

/// What a gate sees of a request.
pub struct Head<'a> {
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The client's address (the TCP peer).
    pub peer: IpAddr,
}

/// A refused request: which middleware, why (a metric label), and what the client is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Denial {
    /// Middleware name (metric label).
    pub middleware: &'static str,
    /// Short reason (metric label).
    pub reason: &'static str,
    /// HTTP status (401, 403, 429).
    pub status: u16,
    /// Problem detail naming the problem.
    pub detail: String,
    /// `WWW-Authenticate` value (401).
    pub challenge: Option<HeaderValue>,
    /// `Retry-After` seconds (429).
    pub retry_after: Option<u64>,
}

impl Denial {
    /// The answer every protocol renders: the status's gRPC code (UNAUTHENTICATED, RESOURCE_EXHAUSTED,
    /// PERMISSION_DENIED), the detail, and Retry-After when the limiter gave one.
    pub(crate) fn answer(&self) -> Answer {
        let a = Answer::refusal(self.status, self.detail.clone());
        match self.retry_after {
            Some(secs) => a.retry_after(secs),
            None => a,
        }
    }
}

/// A check on the request head that admits or refuses it.
pub trait Gate: Send + Sync {
    /// Admits the request, or says why not.
    fn check(&self, head: &Head<'_>) -> Result<(), Denial>;
}

/// One configured middleware step.
#[derive(Clone)]
pub enum Step {
    /// CORS: answers preflights, decorates responses.
    Cors(Arc<cors::Policy>),
    /// Auth or rate limit.
    Gate(Arc<dyn Gate>),
}

/// The configured steps, in spec order.
#[derive(Clone, Default)]
pub struct Stack {
    /// Every step, for HTTP.
    pub steps: Vec<Step>,
    /// The gates only, for gRPC (CORS means nothing there).
    pub gates: Vec<Arc<dyn Gate>>,
}

impl Stack {
    /// Builds the steps of `spec.middleware`, reading keys through `secrets`.
    pub fn build(spec: &RouterSpec, secrets: &Secrets) -> Result<Stack, ConfigError> {
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
                    gate = Some(Arc::new(jwt::JwtGate::build(
                        j,
                        secrets,
                        &format!("{field}.auth.jwt.keySecretRef"),
                    )?));
                } else if let Some(k) = &auth.api_key {
                    gate = Some(Arc::new(api_key::ApiKeyGate::build(
                        k,
                        secrets,
                        &format!("{field}.auth.apiKey"),
                    )?));
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

    /// Runs the gates in order (gRPC); the first refusal is counted and returned.
    pub fn admit(&self, head: &Head<'_>, metrics: &Metrics) -> Result<(), Denial> {
        for g in &self.gates {
            if let Err(d) = g.check(head) {
                metrics.rejected(d.middleware, d.reason);
                return Err(d);
            }
        }
        Ok(())
    }
}
