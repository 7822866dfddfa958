//! Spans dropped because the export queue was full, counted for `/metrics`
//! (`switchyard_trace_spans_dropped_total`).
//!
//! The SDK's batch processor drops a span when its queue is full but keeps the count to itself
//! (it only logs it at shutdown). So the queue bound is kept here instead: [`Bounded`] wraps the
//! batch processor and admits a span only while fewer than `limit` are waiting, [`Draining`] wraps
//! the exporter and releases the spans of each batch as it is handed over. The inner queue is as
//! large as the limit and never holds more than this count, so it never drops on its own and
//! every lost span is counted here.

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Spans admitted and not yet handed to the exporter.
#[derive(Debug)]
pub(crate) struct Queue {
    waiting: AtomicUsize,
    limit: usize,
    dropped: Counter,
}

impl Queue {
    /// A queue of at most `limit` spans counting its drops in `dropped`.
    pub(crate) fn new(limit: usize, dropped: Counter) -> Arc<Queue> {
        Arc::new(Queue {
            waiting: AtomicUsize::new(0),
            limit: limit.max(1),
            dropped,
        })
    }

    /// Takes a place for one span, or counts it dropped.
    fn admit(&self) -> bool {
        let taken = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            self.dropped.inc();
        }
        taken
    }

    /// `n` spans left the queue for the exporter.
    fn release(&self, n: usize) {
        let _ = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(w.saturating_sub(n))
            });
    }
}

/// A span processor that admits spans into `inner` only while the queue has room.
#[derive(Debug)]
pub(crate) struct Bounded<P> {
    inner: P,
    queue: Arc<Queue>,
}

impl<P> Bounded<P> {
    /// Wraps `inner` (a batch processor whose queue holds at least `queue`'s limit).
    pub(crate) fn new(inner: P, queue: Arc<Queue>) -> Self {
        Bounded { inner, queue }
    }
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queue.admit() {
            self.inner.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that frees the queue places of each batch it is given.
#[derive(Debug)]
pub(crate) struct Draining<E> {
    inner: E,
    queue: Arc<Queue>,
}

impl<E> Draining<E> {
    /// Wraps `inner`, releasing places of `queue`.
    pub(crate) fn new(inner: E, queue: Arc<Queue>) -> Self {
        Draining { inner, queue }
    }
}

impl<E: SpanExporter> SpanExporter for Draining<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.queue.release(batch.len());
        self.inner.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_and_counts_the_rest() {
        let dropped = Counter::default();
        let q = Queue::new(2, dropped.clone());
        assert!(q.admit() && q.admit());
        assert!(!q.admit());
        assert_eq!(dropped.get(), 1);
        q.release(1);
        assert!(q.admit());
        assert!(!q.admit());
        assert_eq!(dropped.get(), 2);
        // More released than waiting (never expected) does not wrap around.
        q.release(10);
        assert!(q.admit());
    }
}
