//! The HTTP edge's request parsing (route lookup, parameters, media type, JSON, schema) on arbitrary input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    switchyard_sidecar::fuzz_checks::http_request(data);
});
