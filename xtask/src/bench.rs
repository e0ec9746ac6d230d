//! `cargo xtask bench-pack`: the benchmarks, built for the GPU machine into `.bench/`, with
//! one script that runs them and their peers (Candle's CUDA backend in the same process,
//! torch eager in the same run) and writes `bench.json` and `bench.md` under `$OUT`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::root;
use crate::tiers::{
    cargo, checked_pack_size, compress_binaries, pip_install_into, run_echo, strip, tools_dir,
};

/// Op-crate benchmark examples: (package, example); each has a torch peer
/// `bench/torch_<family>.py` that writes a markdown table.
const CRATE_BENCHES: [(&str, &str); 6] = [
    ("rocm-elementwise", "elementwise_bench"),
    ("rocm-blas", "matmul_bench"),
    ("rocm-reduce", "reduce_bench"),
    ("rocm-indexing", "indexing_bench"),
    ("rocm-dnn", "conv_bench"),
    ("rocm-quantized", "quantized_bench"),
];

/// The Python side: torch peers and the report.
const SCRIPTS: [&str; 9] = [
    "benchlib.py",
    "torch_elementwise.py",
    "torch_matmul.py",
    "torch_reduce.py",
    "torch_indexing.py",
    "torch_conv.py",
    "torch_candle_ops.py",
    "torch_llama.py",
    "report.py",
];

/// The CUDA 13.0 compiler and headers candle-kernels builds with (the GPU machine's driver
/// runs CUDA 13.0: PTX from a newer nvcc would not load there).
const CUDA_WHEELS: [&str; 5] = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-crt==13.0.88",
];

/// Installs the CUDA compiler wheels into target/tools/cuda-13.0 once; returns that folder.
fn cuda_toolkit() -> Result<PathBuf, String> {
    let home = tools_dir().join("cuda-13.0");
    let ready = |home: &Path| {
        [
            "bin/nvcc",
            "nvvm/bin/cicc",
            "include/cuda_runtime.h",
            "lib/libcudart.so",
        ]
        .iter()
        .all(|f| home.join(f).exists())
    };
    if ready(&home) {
        return Ok(home);
    }
    let staging = tools_dir().join("cuda-13.0-wheels");
    if !pip_install_into(&staging, &CUDA_WHEELS)? {
        return Err(format!("pip could not install {}", CUDA_WHEELS.join(" ")));
    }
    // the wheels share one tree, nvidia/cu13: a toolkit folder as nvcc expects it
    if home.exists() {
        std::fs::remove_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    }
    std::fs::rename(staging.join("nvidia").join("cu13"), &home)
        .map_err(|e| format!("{}: {e}", home.display()))?;
    std::fs::remove_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    // the link step names `cudart`; the wheel ships only the versioned library
    std::os::unix::fs::symlink("libcudart.so.13", home.join("lib").join("libcudart.so"))
        .map_err(|e| format!("libcudart.so: {e}"))?;
    if ready(&home) {
        Ok(home)
    } else {
        Err(format!(
            "the CUDA wheels did not give a toolkit at {}",
            home.display()
        ))
    }
}

/// Builds candle-rocm-bench with Candle's CUDA backend beside ours; returns its path.
fn build_candle_bench() -> Result<PathBuf, String> {
    let cuda = cuda_toolkit()?;
    crate::candle::run()?;
    let path = format!(
        "{}:{}",
        cuda.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (ok, _) = run_echo(
        crate::candle::cargo_in_workspace()
            .args([
                "build",
                "--release",
                "-p",
                "candle-rocm-e2e",
                "--features",
                "cuda",
                "--bin",
                "candle-rocm-bench",
            ])
            .env("CUDA_HOME", &cuda)
            .env("PATH", path)
            .env("CUDA_COMPUTE_CAP", "90")
            // cargo's link step finds libcudart here; nothing is linked from it at run time
            // but the library the GPU machine has
            .env("LIBRARY_PATH", cuda.join("lib")),
    )?;
    if !ok {
        return Err("building candle-rocm-bench failed".into());
    }
    Ok(root().join("target/release/candle-rocm-bench"))
}

/// The bench pack's runner (`.bench/run.sh`).
const RUN_SH: &str = include_str!("../scripts/bench-run.sh");

/// `cargo xtask bench-pack`.
pub fn bench_pack() -> Result<bool, String> {
    let out = root().join(".bench");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| e.to_string())?;
    }
    let bin = out.join("bin");
    let py = out.join("py");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&py).map_err(|e| e.to_string())?;
    for (package, example) in CRATE_BENCHES {
        let (ok, _) = run_echo(cargo().args([
            "build",
            "--release",
            "-p",
            package,
            "--features",
            "nvidia",
            "--example",
            example,
        ]))?;
        if !ok {
            return Err(format!("building the benchmark {example} failed"));
        }
        let dest = bin.join(example);
        std::fs::copy(root().join("target/release/examples").join(example), &dest)
            .map_err(|e| e.to_string())?;
        strip(&dest)?;
    }
    let candle_bench = build_candle_bench()?;
    let dest = bin.join("candle-rocm-bench");
    std::fs::copy(&candle_bench, &dest).map_err(|e| e.to_string())?;
    strip(&dest)?;
    for script in SCRIPTS {
        std::fs::copy(root().join("bench").join(script), py.join(script))
            .map_err(|e| format!("bench/{script}: {e}"))?;
    }
    std::fs::write(out.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    std::fs::write(out.join("COMMIT"), commit_description()).map_err(|e| e.to_string())?;
    let ok = compress_binaries(&out, &["bin"])?;
    if !ok {
        return Err("compressing the binaries failed".into());
    }
    std::fs::remove_dir_all(&bin).map_err(|e| e.to_string())?;
    let size = checked_pack_size(&out)?;
    println!(
        "packed the benchmarks into {} ({:.1} MiB); run there: bash .bench/run.sh",
        out.display(),
        size as f64 / 1048576.0
    );
    Ok(true)
}

/// The commit the pack was built from, and whether the tree had changes on top.
fn commit_description() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"]);
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{head} with uncommitted changes\n")
    } else {
        format!("{head}\n")
    }
}
