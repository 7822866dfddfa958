//! `switchyard-sidecar router|manager`: the thin binary over the library's [`switchyard_sidecar::run`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    switchyard_sidecar::run()
}
