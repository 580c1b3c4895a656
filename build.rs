//! Under the `cuda` feature, compiles `kernels/*.cu` to PTX with nvcc (the driver compiles the
//! PTX for the GPU at load time). Other builds need nothing from here.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    // PTX for compute capability 8.0 (or CUDA_COMPUTE_CAP) runs on that GPU and every later one.
    let cap = std::env::var("CUDA_COMPUTE_CAP")
        .ok()
        .and_then(|c| c.trim().replace('.', "").parse::<u32>().ok())
        .unwrap_or(80)
        .min(90);
    for name in ["decode", "prefill", "batch"] {
        let src = format!("kernels/{name}.cu");
        let ptx = out.join(format!("{name}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17"])
            .arg(format!("--gpu-architecture=compute_{cap}"))
            .arg(&src)
            .arg("-o")
            .arg(&ptx)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("nvcc failed on {src} ({s})"),
            Err(e) => panic!(
                "the `cuda` feature needs nvcc to compile {src}, and `{nvcc}` cannot be run ({e}). \
                 Install the CUDA toolkit, or run `scripts/cuda_toolchain.sh DIR` and \
                 `source DIR/env.sh` (it sets NVCC and PATH)"
            ),
        }
    }
}
