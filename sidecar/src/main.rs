//! `switchyard-sidecar router|manager`: the thin binary over the library's [`switchyard_sidecar::run`].

#![forbid(unsafe_code)]

/// mimalloc instead of glibc's malloc: every request allocates and frees small buffers, futures and
/// header maps, and glibc's `malloc`/`free`/`malloc_consolidate` were about a fifth of the manager's
/// CPU on `/noop` (docs/performance-log.md, "The hot path").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    switchyard_sidecar::run()
}
