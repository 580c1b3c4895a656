#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| repohop::fuzzing::symbol_cache(data));
