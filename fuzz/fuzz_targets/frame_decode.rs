//! The router <-> manager frame codec on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    switchyard_protocol::fuzz_checks::frame_decode(data);
});
