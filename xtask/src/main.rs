//! candle-rocm's project commands (`cargo xtask --help` lists them).

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

use clap::{Parser, Subcommand};

/// candle-rocm's project commands.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every verification tier this machine allows (unit, NVRTC, AMD chroot, Candle, GPU).
    Test(tiers::Skips),
    /// Build the GPU test suite and demo into .gpu/ (run there: bash .gpu/run.sh).
    GpuPack,
    /// List platforms, libraries and devices, then run real work on the first GPU.
    Demo,
    /// Materialise Candle's crates with our patches under target/candle/.
    Candle {
        /// Materialise them in this folder instead, for projects outside this repository.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Build the benchmarks, Candle CUDA and torch peers into .bench/ (run there: bash .bench/run.sh).
    BenchPack,
    /// Serve a GGUF model behind OpenAI's API (`candle-rocm-llm serve`, built here): SmolLM2
    /// from PyPI unless --model names a file; on the GPU where one is found, else the CPU.
    Serve {
        /// candle-rocm-llm serve's options (--model, --port, --parallel, --device, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Test(skips) => tiers::test(&skips),
        Command::GpuPack => pack::gpu_pack(),
        Command::Demo => demo::run(),
        Command::Candle { out } => candle::run_with(out.as_deref()),
        Command::BenchPack => bench::bench_pack(),
        Command::Serve { args } => demo::serve(&args),
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
