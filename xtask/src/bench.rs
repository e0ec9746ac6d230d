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
const CRATE_BENCHES: [(&str, &str); 7] = [
    ("rocm-elementwise", "elementwise_bench"),
    ("rocm-blas", "matmul_bench"),
    ("rocm-reduce", "reduce_bench"),
    ("rocm-indexing", "indexing_bench"),
    ("rocm-dnn", "conv_bench"),
    ("rocm-quantized", "quantized_bench"),
    ("rocm-attention", "attention_bench"),
];

/// The Python side (torch peers and the report) and llama.cpp's load timer, built beside
/// llama-bench.
const SCRIPTS: [&str; 15] = [
    "benchlib.py",
    "torch_elementwise.py",
    "torch_matmul.py",
    "torch_reduce.py",
    "torch_indexing.py",
    "torch_conv.py",
    "torch_candle_ops.py",
    "torch_llama.py",
    "torch_quantized.py",
    "torch_attention.py",
    "report.py",
    "report_decode.py",
    "ncu_step.py",
    "server_load.py",
    "llama_load.cpp",
];

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
    let (sdist, version) = crate::candle::llama_cpp_sdist()?;
    // Python's tarfile reads the sdist and writes the trimmed tree: every tool (CMake adds
    // each); of the server only its sources, of its web UI only what CMake reads to embed no
    // assets (the server runs without its UI).
    let script = format!(
        "import io, sys, tarfile\n\
         src = tarfile.open(sys.argv[1])\n\
         prefix = 'llama_cpp_python-{version}/vendor/llama.cpp/'\n\
         keep = {keep:?}\n\
         backends = {backends:?}\n\
         ui = ('CMakeLists.txt', 'sources.cmake', 'ui.cpp.in', 'ui.h.in')\n\
         def wanted(rel):\n\
         \x20   if any(rel == k or (k.endswith('/') and rel.startswith(k)) for k in keep): return True\n\
         \x20   if rel.startswith('ggml/src/'):\n\
         \x20       part = rel[len('ggml/src/'):].split('/')[0]\n\
         \x20       return not part.startswith('ggml-') or '.' in part or part in backends\n\
         \x20   if rel.startswith('tools/server/'):\n\
         \x20       return '/' not in rel[len('tools/server/'):] and not rel.endswith('.md')\n\
         \x20   if rel.startswith('tools/ui/'):\n\
         \x20       return rel[len('tools/ui/'):] in ui\n\
         \x20   if rel.startswith('tools/'): return True\n\
         \x20   return rel == 'scripts/ui-assets.cmake'\n\
         with tarfile.open(sys.argv[2], 'w:xz') as dst:\n\
         \x20   for m in src.getmembers():\n\
         \x20       if m.isfile() and m.name.startswith(prefix) and wanted(m.name[len(prefix):]):\n\
         \x20           data = src.extractfile(m).read()\n\
         \x20           m.name = 'llama.cpp/' + m.name[len(prefix):]\n\
         \x20           dst.addfile(m, io.BytesIO(data))\n",
        keep = LLAMA_CPP_KEEP,
        backends = LLAMA_CPP_GGML_BACKENDS,
    );
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
        format!("{} (vendor/llama.cpp)\n", crate::candle::LLAMA_CPP_SDIST),
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

/// Builds candle-rocm-bench with Candle's CUDA backend beside ours, and the LLM runtime's CLI
/// (its server, for the server benchmark) in the same build; returns the folder they are in.
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
                "-p",
                "candle-rocm-llm",
                "--features",
                "candle-rocm-e2e/cuda,candle-rocm-llm/nvidia",
                "--bin",
                "candle-rocm-bench",
                "--bin",
                "candle-rocm-llm",
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
    Ok(root().join("target/release"))
}

/// The bench pack's runner (`.bench/run.sh`).
const RUN_SH: &str = include_str!("../scripts/bench-run.sh");

/// A cursor over a GGUF file's bytes.
struct GgufCursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> GgufCursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .data
            .get(self.at..self.at.saturating_add(n))
            .ok_or("a GGUF file ends early")?;
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// Steps over one value of GGUF type `ty` (arrays element by element).
    fn skip(&mut self, ty: u32) -> Result<(), String> {
        match ty {
            0 | 1 | 7 => self.take(1).map(drop),
            2 | 3 => self.take(2).map(drop),
            4..=6 => self.take(4).map(drop),
            10..=12 => self.take(8).map(drop),
            8 => {
                let n = self.u64()?;
                self.take(n as usize).map(drop)
            }
            9 => {
                let inner = self.u32()?;
                let n = self.u64()?;
                (0..n).try_for_each(|_| self.skip(inner))
            }
            other => Err(format!("GGUF value type {other}")),
        }
    }
}

/// Writes to `dst` a GGUF (version 3, no tensors) holding only the `tokenizer.*` metadata of the
/// GGUF `src`: what the GGUF benchmark takes from SmolLM2's file (about 1.7 MB of its 94), so
/// that step needs no GGUF halves carried before the pack.
pub fn tokenizer_gguf(src: &Path, dst: &Path) -> Result<(), String> {
    let data = std::fs::read(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut c = GgufCursor { data: &data, at: 0 };
    if c.take(4)? != b"GGUF" {
        return Err(format!("{}: not a GGUF file", src.display()));
    }
    let (_version, _tensors, entries) = (c.u32()?, c.u64()?, c.u64()?);
    let (mut kept, mut count) = (Vec::new(), 0u64);
    for _ in 0..entries {
        let start = c.at;
        let key_len = c.u64()? as usize;
        let is_tokenizer = c.take(key_len)?.starts_with(b"tokenizer.");
        let ty = c.u32()?;
        c.skip(ty)?;
        if is_tokenizer {
            kept.extend_from_slice(&data[start..c.at]);
            count += 1;
        }
    }
    let mut out = Vec::with_capacity(kept.len() + 24);
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&kept);
    std::fs::write(dst, out).map_err(|e| format!("{}: {e}", dst.display()))
}

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
    let built = build_candle_bench()?;
    for name in ["candle-rocm-bench", "candle-rocm-llm"] {
        let dest = bin.join(name);
        std::fs::copy(built.join(name), &dest).map_err(|e| format!("{name}: {e}"))?;
        strip(&dest)?;
    }
    for script in SCRIPTS {
        std::fs::copy(root().join("bench").join(script), py.join(script))
            .map_err(|e| format!("bench/{script}: {e}"))?;
    }
    std::fs::write(out.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    std::fs::write(out.join("join-gguf.sh"), crate::pack::JOIN_GGUF_SH)
        .map_err(|e| e.to_string())?;
    std::fs::write(out.join("COMMIT"), commit_description()).map_err(|e| e.to_string())?;
    pack_llama_cpp(&out)?;
    tokenizer_gguf(&crate::candle::smollm2_gguf()?, &out.join("tokenizer.gguf"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
        let mut e = (key.len() as u64).to_le_bytes().to_vec();
        e.extend_from_slice(key.as_bytes());
        e.extend_from_slice(&ty.to_le_bytes());
        e.extend_from_slice(value);
        e
    }

    #[test]
    fn the_tokenizer_gguf_keeps_the_tokenizer_entries_alone() {
        let string = |s: &str| {
            let mut v = (s.len() as u64).to_le_bytes().to_vec();
            v.extend_from_slice(s.as_bytes());
            v
        };
        let mut tokens = 8u32.to_le_bytes().to_vec(); // array of strings
        tokens.extend_from_slice(&2u64.to_le_bytes());
        tokens.extend(string("a"));
        tokens.extend(string("bc"));
        let kept = [
            entry("tokenizer.ggml.tokens", 9, &tokens),
            entry("tokenizer.ggml.bos_token_id", 4, &7u32.to_le_bytes()),
        ];
        let mut file = b"GGUF".to_vec();
        file.extend_from_slice(&3u32.to_le_bytes());
        file.extend_from_slice(&1u64.to_le_bytes());
        file.extend_from_slice(&4u64.to_le_bytes());
        file.extend(entry("general.architecture", 8, &string("llama")));
        file.extend_from_slice(&kept[0]);
        file.extend(entry("llama.block_count", 4, &2u32.to_le_bytes()));
        file.extend_from_slice(&kept[1]);
        file.extend_from_slice(&[0xaa; 40]); // tensor infos and data: not read
        let dir = std::env::temp_dir().join(format!("xtask-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, dst) = (dir.join("in.gguf"), dir.join("out.gguf"));
        std::fs::write(&src, &file).unwrap();
        tokenizer_gguf(&src, &dst).unwrap();
        let out = std::fs::read(&dst).unwrap();
        let mut want = b"GGUF".to_vec();
        want.extend_from_slice(&3u32.to_le_bytes());
        want.extend_from_slice(&0u64.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend(kept.concat());
        assert_eq!(out, want);
        // a file cut inside an entry is an error, not a panic
        std::fs::write(&src, &file[..60]).unwrap();
        assert!(tokenizer_gguf(&src, &dst).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
