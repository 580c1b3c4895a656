#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| repohop::fuzzing::python_repo(data));
