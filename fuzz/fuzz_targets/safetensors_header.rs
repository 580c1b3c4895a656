#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| repohop::fuzzing::safetensors_header(data));
