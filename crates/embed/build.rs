//! With the `cuda` feature, compiles the crate's own CUDA kernels
//! (`cuda/*.cu`) to PTX with nvcc, for `include_str!` (Candle's kernels are
//! built the same way, by candle-kernels). Without it, nothing.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cuda/attention.cu");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=CUDA_ROOT");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The compute capability Candle's kernels are built for (scripts/env/
    // build-cuda.sh sets it; 80, Ampere, where nothing does): PTX for it
    // runs on that GPU and every later one.
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "80".into());
    let nvcc = std::env::var_os("CUDA_ROOT")
        .map(|root| PathBuf::from(root).join("bin").join("nvcc"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17"])
        .arg(format!("-arch=compute_{cap}"))
        .arg("cuda/attention.cu")
        .arg("-o")
        .arg(out.join("attention.ptx"))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (the cuda feature needs nvcc: scripts/env/build-cuda.sh)",
                nvcc.display()
            )
        });
    assert!(status.success(), "nvcc failed on cuda/attention.cu");
}
