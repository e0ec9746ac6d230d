//! candle-rocm's project commands.
//!
//! - `cargo xtask test`: every verification tier this machine allows, one summary line.
//! - `cargo xtask gpu-pack`: stripped release test binaries + `run.sh` into `.gpu/`.
//! - `cargo xtask demo`: discovery and a smoke kernel on the first device.
//! - `cargo xtask candle`: Candle's crates with our `rocm` patches, under `target/candle/`.
//! - `cargo xtask bench-pack`: the benchmarks and their peers into `.bench/`.

mod amd;
mod bench;
mod candle;
mod demo;
mod outcome;
mod pack;
mod shim;
mod tiers;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: cargo xtask <command>\n\n\
         commands:\n  \
         test       run every verification tier this machine allows (unit, NVRTC, AMD chroot, GPU)\n  \
         gpu-pack   build the GPU test suite and demo into .gpu/ (run there: bash .gpu/run.sh)\n  \
         demo       list platforms, libraries and devices, then run a smoke kernel\n  \
         candle     materialise Candle's crates with our patches under target/candle/ (--out DIR: in DIR, for projects outside this repository)\n  \
         bench-pack build the benchmarks, Candle CUDA and torch peers into .bench/ (run there: bash .bench/run.sh)"
    );
    ExitCode::from(2)
}

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => tiers::test(&args[1..]),
        Some("gpu-pack") => pack::gpu_pack(),
        Some("demo") => demo::run(),
        Some("candle") => candle::run_with(&args[1..]),
        Some("bench-pack") => bench::bench_pack(),
        _ => return usage(),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
