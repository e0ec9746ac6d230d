//! `cargo xtask bench-pack`: the benchmarks, built for the GPU machine into `.bench/`, with
//! one script that runs them and their peers (Candle's CUDA backend in the same process,
//! torch eager in the same run) and writes `bench.json` and `bench.md` under `$OUT`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::root;
use crate::tools::{
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
const SCRIPTS: [&str; 11] = [
    "benchlib.py",
    "torch_elementwise.py",
    "torch_matmul.py",
    "torch_reduce.py",
    "torch_indexing.py",
    "torch_conv.py",
    "torch_candle_ops.py",
    "torch_llama.py",
    "torch_quantized.py",
    "report.py",
    "report_decode.py",
];

/// llama.cpp, the GGUF peer: the source vendored in this sdist (pinned by version), built
/// with CUDA on the GPU machine by `.bench/run.sh`.
const LLAMA_CPP_SDIST: &str = "llama-cpp-python==0.3.36";
/// What the CUDA build of llama-bench needs from the sdist's vendor/llama.cpp (the other
/// backends, docs and models are left out: the machine takes 64 MiB).
const LLAMA_CPP_KEEP: [&str; 10] = [
    "CMakeLists.txt",
    "LICENSE",
    "cmake/",
    "common/",
    "ggml/CMakeLists.txt",
    "ggml/cmake/",
    "ggml/include/",
    "include/",
    "src/",
    "vendor/",
];
/// Kept under ggml/src: the core files and the CPU and CUDA backends.
const LLAMA_CPP_GGML_BACKENDS: [&str; 2] = ["ggml-cpu", "ggml-cuda"];

/// `.bench/llama.cpp.tar.xz`: llama.cpp's sources from the pinned sdist, trimmed; the sdist is
/// downloaded once into target/tools/wheels.
fn pack_llama_cpp(out: &Path) -> Result<(), String> {
    let wheels = crate::tools::pip_download(LLAMA_CPP_SDIST, &["--no-binary", "llama-cpp-python"])?;
    let version = LLAMA_CPP_SDIST.split_once("==").map_or("", |(_, v)| v);
    // Python's tarfile reads the sdist and writes the trimmed tree (every tool but the server
    // and its web UI, which are built only with LLAMA_BUILD_SERVER: CMake adds each tool).
    let script = format!(
        "import io, sys, tarfile\n\
         src = tarfile.open(sys.argv[1])\n\
         prefix = 'llama_cpp_python-{version}/vendor/llama.cpp/'\n\
         keep = {keep:?}\n\
         backends = {backends:?}\n\
         def wanted(rel):\n\
         \x20   if any(rel == k or (k.endswith('/') and rel.startswith(k)) for k in keep): return True\n\
         \x20   if rel.startswith('ggml/src/'):\n\
         \x20       part = rel[len('ggml/src/'):].split('/')[0]\n\
         \x20       return not part.startswith('ggml-') or '.' in part or part in backends\n\
         \x20   if rel.startswith('tools/'):\n\
         \x20       return not rel.startswith(('tools/ui/', 'tools/server/'))\n\
         \x20   return False\n\
         with tarfile.open(sys.argv[2], 'w:xz') as dst:\n\
         \x20   for m in src.getmembers():\n\
         \x20       if m.isfile() and m.name.startswith(prefix) and wanted(m.name[len(prefix):]):\n\
         \x20           data = src.extractfile(m).read()\n\
         \x20           m.name = 'llama.cpp/' + m.name[len(prefix):]\n\
         \x20           dst.addfile(m, io.BytesIO(data))\n",
        keep = LLAMA_CPP_KEEP,
        backends = LLAMA_CPP_GGML_BACKENDS,
    );
    let sdist = wheels.join(format!("llama_cpp_python-{version}.tar.gz"));
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&sdist)
        .arg(out.join("llama.cpp.tar.xz"))
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err(format!(
            "trimming llama.cpp out of {} failed",
            sdist.display()
        ));
    }
    std::fs::write(
        out.join("LLAMA_CPP"),
        format!("{LLAMA_CPP_SDIST} (vendor/llama.cpp)\n"),
    )
    .map_err(|e| e.to_string())
}

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
    std::fs::write(out.join("join-gguf.sh"), crate::pack::JOIN_GGUF_SH)
        .map_err(|e| e.to_string())?;
    std::fs::write(out.join("COMMIT"), commit_description()).map_err(|e| e.to_string())?;
    pack_llama_cpp(&out)?;
    crate::pack::pack_gguf_halves(&out)?;
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
