// Nothing to build without the `cuda` feature; CUDA kernels in kernels/ will be compiled here.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
