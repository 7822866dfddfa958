//! The tower shell around the pure decisions: one [`MiddlewareLayer`] per configured step, stacked
//! in spec order around the HTTP service (the first entry is the outermost).

use super::cors::Decision;
use super::gate::{Denial, Gate, Head};
use super::grant::Grant;
use super::{Stack, Step};
use crate::answer::http::Reply;
use crate::metrics::Metrics;
use crate::net::stream::out_body::OutBody;
use crate::timing::StageTimes;
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::Full;
use hyper::header::{
    CONNECTION, CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING, UPGRADE, WWW_AUTHENTICATE,
};
use hyper::{Request, Response, StatusCode, Version};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt as _};

/// A boxed HTTP service, as the stack is built at run time from the spec.
pub(super) type HttpService<B> = BoxCloneSyncService<Request<B>, Response<OutBody>, Infallible>;

/// The response a denial gets: problem+json with `WWW-Authenticate` or `Retry-After` as fitting.
pub(crate) fn denial_response(d: &Denial) -> Response<Full<Bytes>> {
    // Refused before any stage ran: the timing header says so (total 0) rather than vanishing.
    let mut resp = Reply::answer(&d.answer()).into_response(Some(&StageTimes::default()));
    if let Some(c) = &d.challenge {
        resp.headers_mut().insert(WWW_AUTHENTICATE, c.clone());
    }
    resp
}

/// A refusal answered before the request body was read: on HTTP/1 the unread body means the
/// connection cannot carry another request, so the answer says so (as the listener does for 413).
fn refused<B>(req: &Request<B>, resp: Response<Full<Bytes>>) -> Response<OutBody> {
    let mut resp = resp.map(OutBody::from);
    let h = req.headers();
    let has_body = h.contains_key(TRANSFER_ENCODING)
        || h.get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    if has_body && req.version() <= Version::HTTP_11 {
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Wraps one step around a service, for one client connection.
#[derive(Clone)]
pub(super) struct MiddlewareLayer {
    step: Step,
    peer: IpAddr,
    metrics: Arc<Metrics>,
}

impl<S> Layer<S> for MiddlewareLayer {
    type Service = MiddlewareService<S>;

    fn layer(&self, inner: S) -> MiddlewareService<S> {
        MiddlewareService {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service a [`MiddlewareLayer`] makes.
#[derive(Clone)]
pub(super) struct MiddlewareService<S> {
    layer: MiddlewareLayer,
    inner: S,
}

impl<S, B> Service<Request<B>> for MiddlewareService<S>
where
    S: Service<Request<B>, Response = Response<OutBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<OutBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<OutBody>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Every service below is always ready; readiness is taken in `call` through `oneshot`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let metrics = &self.layer.metrics;
        match &self.layer.step {
            Step::Gate(gate) => {
                let peer = self.layer.peer;
                let head = Head {
                    headers: req.headers(),
                    peer,
                };
                match gate.prepare(&head) {
                    None => pass_gate(gate, peer, metrics, req, inner),
                    // The gate decides once its bounded work (a key fetch) is done.
                    Some(wait) => {
                        let gate = gate.clone();
                        let metrics = metrics.clone();
                        Box::pin(async move {
                            wait.await;
                            pass_gate(&gate, peer, &metrics, req, inner).await
                        })
                    }
                }
            }
            Step::Cors(policy) => match policy.decide(req.method(), req.headers()) {
                Decision::Pass => Box::pin(inner.oneshot(req)),
                Decision::Preflight(headers) => {
                    let mut resp = Response::new(OutBody::from(Full::new(Bytes::new())));
                    *resp.status_mut() = StatusCode::NO_CONTENT;
                    resp.headers_mut().extend(headers);
                    Box::pin(async move { Ok(resp) })
                }
                Decision::Refuse(reason, detail) => {
                    metrics.rejected("cors", reason);
                    let resp = Reply::problem(403, &detail)
                        .into_response(Some(&StageTimes::default()))
                        .map(OutBody::from);
                    Box::pin(async move { Ok(resp) })
                }
                Decision::Decorate(headers) => Box::pin(async move {
                    let mut resp = inner.oneshot(req).await?;
                    resp.headers_mut().extend(headers);
                    Ok(resp)
                }),
            },
        }
    }
}

/// `gate`'s decision on `req`: refused with its problem answer, or passed on to `inner` (with
/// the grant of an upgrade that becomes a session).
fn pass_gate<S, B>(
    gate: &Arc<dyn Gate>,
    peer: IpAddr,
    metrics: &Metrics,
    mut req: Request<B>,
    inner: S,
) -> BoxFuture<'static, Result<Response<OutBody>, Infallible>>
where
    S: Service<Request<B>, Response = Response<OutBody>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    let head = Head {
        headers: req.headers(),
        peer,
    };
    let grant = match gate.check(&head) {
        Err(d) => {
            metrics.rejected(d.middleware, d.reason);
            let resp = refused(&req, denial_response(&d));
            return Box::pin(async move { Ok(resp) });
        }
        // Only an upgrade can become a session; other requests need no grant.
        Ok(token) if req.headers().contains_key(UPGRADE) => Grant::of(gate, &head, token),
        Ok(_) => None,
    };
    // A WebSocket session takes it over, to end when the credential lapses.
    if let Some(g) = grant {
        req.extensions_mut().insert(g);
    }
    Box::pin(inner.oneshot(req))
}

impl Stack {
    /// Whether any step applies to HTTP.
    pub(crate) fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// `inner` wrapped in every step, the first spec entry outermost, for a client at `peer`.
    pub(crate) fn wrap<S, B>(
        &self,
        inner: S,
        peer: IpAddr,
        metrics: &Arc<Metrics>,
    ) -> HttpService<B>
    where
        S: Service<Request<B>, Response = Response<OutBody>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
    {
        let mut svc = BoxCloneSyncService::new(inner);
        for step in self.steps.iter().rev() {
            let layer = MiddlewareLayer {
                step: step.clone(),
                peer,
                metrics: metrics.clone(),
            };
            svc = BoxCloneSyncService::new(layer.layer(svc));
        }
        svc
    }
}
