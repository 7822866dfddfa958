//! The async runtime the sidecar runs on, sized by `--runtime-threads`.

/// Environment variable for `--runtime-threads` (the example app reads the same one).
pub(crate) use switchyard_protocol::env::RUNTIME_THREADS as THREADS_ENV;

/// Builds the runtime: `1` runs every task on the calling thread (no cross-thread wake-ups, the cheapest
/// when the sidecar shares a few cores with its app), `n > 1` a work-stealing pool of `n` threads, `0` one
/// worker per CPU.
pub(crate) fn build(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if threads > 1 {
            b.worker_threads(threads);
        }
        b
    };
    builder.enable_all().build()
}
