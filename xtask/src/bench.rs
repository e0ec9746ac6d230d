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
const CRATE_BENCHES: [(&str, &str); 5] = [
    ("rocm-elementwise", "elementwise_bench"),
    ("rocm-blas", "matmul_bench"),
    ("rocm-reduce", "reduce_bench"),
    ("rocm-indexing", "indexing_bench"),
    ("rocm-dnn", "conv_bench"),
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

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every benchmark and its peers on this GPU; writes bench.json, bench.md and run.log
# under $OUT (default .bench/results).
# Usage: bash .bench/run.sh [--quick] [--skip-crates] [--skip-ops] [--skip-model]
set -u
here=$(cd "$(dirname "$0")" && pwd)
# torch loads the CUDA libraries it bundles: python runs with the caller's library path
py_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CANDLE_ROCM_PLATFORM=${CANDLE_ROCM_PLATFORM:-nvidia}
export CANDLE_ROCM_CACHE_DIR=${CANDLE_ROCM_CACHE_DIR:-$(mktemp -d)/kernel-cache}
out=${OUT:-$here/results}; mkdir -p "$out"
work=$(mktemp -d)
quick=""; crates=1; ops=1; model=1
for a in "$@"; do
  case $a in
    --quick) quick=--quick;; --skip-crates) crates=0;; --skip-ops) ops=0;; --skip-model) model=0;;
  esac
done
[ -d "$here/bin" ] || tar -C "$here" -xJf "$here/binaries.tar.xz" || exit 1
exec > >(tee "$out/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$work/gpu.txt"
cat "$work/gpu.txt"
py=$here/py
python=("${py_env[@]}" python3)
# 1. the op crates' own benches (no Candle in between), each with its torch peer
if [ $crates = 1 ]; then
  for b in "$here"/bin/*_bench; do
    name=$(basename "$b"); echo "== $name"
    "$b" > "$work/crate-$name.jsonl" &&
      "${python[@]}" "$py/torch_${name%_bench}.py" "$work/crate-$name.jsonl" "$work/crate-$name.md" ||
      echo "FAILED: $name"
  done
fi
# 2. Candle ops on Device::Rocm and Device::Cuda (one process), then torch; twice, for noise
for pass in 1 2; do
  [ $ops = 1 ] || break
  echo "== Candle ops, pass $pass"
  "$here/bin/candle-rocm-bench" ops $quick > "$work/ops-$pass.jsonl" || echo "FAILED: Candle ops"
  "${python[@]}" "$py/torch_candle_ops.py" "$work/ops-$pass.jsonl" "$work/torch-ops-$pass.jsonl" $quick ||
    echo "FAILED: torch ops"
done
# 3. the llama model, one process per peer, each twice; then once more per peer with
# nvidia-smi sampling its device memory (apart from the timed runs: a query can stall them)
if [ $model = 1 ]; then
  "$here/bin/candle-rocm-bench" model --save-weights "$work/llama.safetensors" \
    --save-config "$work/llama.json" --repeats 5 --device none || echo "FAILED: writing the weights"
  for pass in 1 2 mem; do
    [ $pass = mem ] && { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
      -lms 100 > "$work/mem.csv" & smi=$!; }
    for dev in rocm cuda; do
      echo "== model on $dev, pass $pass"
      "$here/bin/candle-rocm-bench" model --device $dev --repeats 5 \
        --logits "$work/logits-$dev-$pass.f32" > "$work/model-$dev-$pass.json" &
      pid=$!; wait $pid || echo "FAILED: model on $dev"; echo $pid > "$work/pid-$dev-$pass"
    done
    echo "== model on torch, pass $pass"
    "${python[@]}" "$py/torch_llama.py" "$work/llama.safetensors" "$work/llama.json" \
      "$work/model-torch-$pass.json" "$work/logits-torch-$pass.f32" &
    pid=$!; wait $pid || echo "FAILED: model on torch"; echo $pid > "$work/pid-torch-$pass"
  done
  kill $smi
  # the reference: the same model in f32 on each peer
  for dev in rocm cuda; do
    echo "== model on $dev, f32"
    "$here/bin/candle-rocm-bench" model --device $dev --dtype f32 --repeats 1 \
      --logits "$work/logits-$dev-f32.f32" > "$work/model-$dev-f32.json" || echo "FAILED: f32 on $dev"
  done
  echo "== model on torch, f32"
  "${python[@]}" "$py/torch_llama.py" "$work/llama.safetensors" "$work/llama.json" \
    "$work/model-torch-f32.json" "$work/logits-torch-f32.f32" --f32 || echo "FAILED: f32 on torch"
fi
# the raw figures travel back too, so the report can be redone anywhere
tar -C "$work" -cJf "$out/raw.tar.xz" --exclude=llama.safetensors .
"${python[@]}" "$py/report.py" "$work" "$here/COMMIT" "$out"
"#;

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
