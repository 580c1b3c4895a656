//! The device the model tests run on: the GPU when the crate is built with `cuda` and one can
//! be opened, else the CPU (a CPU build always uses the CPU, as before).
//!
//! A `cuda` build that finds no GPU says so on stderr and falls back to the CPU, unless
//! `REPOHOP_REQUIRE_GPU` is set: then it panics, so that a GPU check cannot pass on the CPU.

#![allow(dead_code)]

use std::sync::OnceLock;

use candle_core::Device;

/// The device for this test binary, chosen once.
pub fn test_device() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(pick).clone()
}

#[cfg(feature = "cuda")]
fn pick() -> Device {
    match repohop::gpu::open_cuda(0) {
        Ok(d) => {
            eprintln!("[test_device] built with `cuda`: running on CUDA GPU 0");
            d
        }
        Err(e) => {
            if std::env::var_os("REPOHOP_REQUIRE_GPU").is_some() {
                panic!(
                    "[test_device] REPOHOP_REQUIRE_GPU is set but CUDA GPU 0 cannot be opened: {e}"
                );
            }
            eprintln!(
                "[test_device] WARNING: built with `cuda` but CUDA GPU 0 cannot be opened ({e}); \
                 these tests run on the CPU, not the GPU"
            );
            Device::Cpu
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn pick() -> Device {
    Device::Cpu
}

/// Panics unless `dev` is where the test device is (the same GPU, or the CPU): e.g. that an
/// engine, which opens its own device, really loaded onto the GPU.
pub fn assert_on_test_device(dev: &Device, what: &str) {
    let want = test_device().location();
    assert_eq!(dev.location(), want, "{what} is not on the test device");
}
