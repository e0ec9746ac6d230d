//! `cargo xtask gpu-pack`: the stripped release test binaries (nvidia platform), Candle's
//! device-test binaries, the demos, the HIP shim and `run.sh` into `.gpu/`; the SmolLM2 GGUF in
//! two halves beside it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::amd::CHROOT_DIR;
use crate::root;
use crate::tiers::{GPU_TEST_FEATURES, NVIDIA_FEATURES};
use crate::tools::{
    cargo, checked_pack_size, compress_binaries, run_echo, strip, test_executables,
    test_executables_of,
};

/// The GPU pack's runner (`.gpu/run.sh`).
const RUN_SH: &str = include_str!("../scripts/gpu-run.sh");
/// Chains of the suite in several modes side by side, in one device call.
const MODES_SH: &str = include_str!("../scripts/gpu-modes.sh");
/// Joins the GGUF halves carried apart from a pack (`.gpu/join-gguf.sh`, `.bench/join-gguf.sh`).
pub(crate) const JOIN_GGUF_SH: &str = include_str!("../scripts/join-gguf.sh");

/// `cargo xtask gpu-pack`: release test binaries (nvidia platform) and the demo into .gpu/.
pub fn gpu_pack() -> Result<bool, String> {
    let out = root().join(".gpu");
    let tests_dir = out.join("tests");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(&tests_dir).map_err(|e| e.to_string())?;
    let features = format!("{GPU_TEST_FEATURES},{NVIDIA_FEATURES}");
    let mut exes = test_executables(&["--release", "--workspace", "--features", &features])?;
    crate::candle::run()?;
    exes.extend(
        test_executables_of(
            crate::candle::cargo_in_workspace(),
            &[
                &["--release"][..],
                &crate::candle::TEST_PACKAGES,
                &["--features", crate::candle::NVIDIA_TEST_FEATURES],
            ]
            .concat(),
        )?
        .into_iter()
        .filter(|(n, _)| crate::candle::DEVICE_TESTS.contains(&n.as_str())),
    );
    // Only test targets without a tier feature and the GPU ones are built here; the compile
    // tiers run in `cargo xtask test`, not on the GPU machine's time.
    let mut packed = 0;
    for (name, exe) in &exes {
        packed += 1;
        // `<crate dir>-<binary>`: GPU_TESTS='rocm-indexing-*' runs one crate's tests
        let stem = exe
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let package = name.split('/').next().unwrap_or_default();
        let dest = tests_dir.join(format!("{package}-{stem}"));
        std::fs::copy(exe, &dest).map_err(|e| e.to_string())?;
        strip(&dest)?;
    }
    // The multi-GPU suite and collective benchmark, run by `run.sh --multi-gpu` only.
    let multi_dir = out.join("multi");
    std::fs::create_dir_all(&multi_dir).map_err(|e| e.to_string())?;
    let multi = test_executables(&[
        "--release",
        "-p",
        "rocm-ccl",
        "--features",
        "rocm-ccl/multi-gpu-tests,rocm-ccl/nvidia",
        "--test",
        "multi_gpu",
    ])?;
    for (_, exe) in multi.iter().filter(|(n, _)| n.ends_with("/multi_gpu")) {
        let dest = multi_dir.join("rocm-ccl-multi_gpu");
        std::fs::copy(exe, &dest).map_err(|e| e.to_string())?;
        strip(&dest)?;
    }
    let (ok, _) = run_echo(cargo().args([
        "build",
        "--release",
        "-p",
        "rocm-ccl",
        "--features",
        "nvidia",
        "--example",
        "ccl_bench",
    ]))?;
    if !ok {
        return Err("building ccl_bench failed".into());
    }
    let dest = multi_dir.join("ccl_bench");
    std::fs::copy(root().join("target/release/examples/ccl_bench"), &dest)
        .map_err(|e| e.to_string())?;
    strip(&dest)?;
    std::fs::copy(
        root().join("bench/torch_ccl.py"),
        multi_dir.join("torch_ccl.py"),
    )
    .map_err(|e| e.to_string())?;
    let (ok, _) = run_echo(cargo().args(["build", "--release", "-p", "xtask"]))?;
    if !ok {
        return Err("building the demo failed".into());
    }
    let demo = out.join("xtask");
    std::fs::copy(root().join("target/release/xtask"), &demo).map_err(|e| e.to_string())?;
    strip(&demo)?;
    std::fs::write(out.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    std::fs::write(out.join("modes.sh"), MODES_SH).map_err(|e| e.to_string())?;
    std::fs::write(out.join("join-gguf.sh"), JOIN_GGUF_SH).map_err(|e| e.to_string())?;
    // The model demo and an f16 copy of its model (the f32 one would not fit).
    let demo_bin = crate::candle::build_demo()?;
    std::fs::create_dir_all(out.join("bin")).map_err(|e| e.to_string())?;
    let packed_demo = out.join("bin").join("candle-rocm-demo");
    std::fs::copy(&demo_bin, &packed_demo).map_err(|e| e.to_string())?;
    strip(&packed_demo)?;
    let packed_tp = out.join("bin").join("candle-rocm-tp");
    std::fs::copy(demo_bin.with_file_name("candle-rocm-tp"), &packed_tp)
        .map_err(|e| e.to_string())?;
    strip(&packed_tp)?;
    // the LLM runtime's CLI and docs/llm.md's chat program, as a user builds them
    for (built, name) in [
        (
            demo_bin.with_file_name("candle-rocm-llm"),
            "candle-rocm-llm",
        ),
        (demo_bin.with_file_name("examples").join("chat"), "chat"),
    ] {
        let packed = out.join("bin").join(name);
        std::fs::copy(&built, &packed).map_err(|e| format!("{}: {e}", built.display()))?;
        strip(&packed)?;
    }
    // the server's client checks (tests/server_client.py) with OpenAI's client as wheels,
    // installed there by run.sh (no network on the GPU machine)
    let server_dir = out.join("server");
    let wheels = crate::candle::openai_client_wheels()?;
    std::fs::create_dir_all(server_dir.join("wheels")).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(&wheels).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            let name = path.file_name().unwrap_or_default();
            std::fs::copy(&path, server_dir.join("wheels").join(name))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    std::fs::copy(
        root().join("candle/llm/tests/server_client.py"),
        server_dir.join("server_client.py"),
    )
    .map_err(|e| format!("server_client.py: {e}"))?;
    let (ok, _) = run_echo(
        Command::new(&demo_bin)
            .arg("--export-f16")
            .arg(crate::candle::minilm_dir()?)
            .arg(side_dir("minilm")?.join("all-MiniLM-L6-v2")),
    )?;
    if !ok {
        return Err("exporting the f16 model failed".into());
    }
    pack_gguf_halves(&out)?;
    // The HIP shim of `run.sh --amd-shim`, built against the chroot's ROCm headers.
    let (ok, _) = run_echo(
        Command::new("bash")
            .arg(root().join("xtask").join("scripts").join("amd-chroot.sh"))
            .arg(CHROOT_DIR),
    )?;
    if !ok {
        return Err("building the ROCm chroot (for the HIP shim's headers) failed".into());
    }
    crate::shim::build(
        &PathBuf::from(CHROOT_DIR).join("usr/include"),
        &out.join("shim").join("lib"),
    )?;
    // Compressed: the machine takes at most 64 MiB, and binaries shrink about fourfold.
    let ok = compress_binaries(&out, &["tests", "bin", "multi"])?;
    if !ok {
        return Err("compressing the binaries failed".into());
    }
    std::fs::remove_dir_all(&tests_dir).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(out.join("bin")).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&multi_dir).map_err(|e| e.to_string())?;
    let size = checked_pack_size(&out)?;
    println!(
        "packed {} test binaries and the demos into {} ({:.1} MiB); the GGUF halves and the \
         demo's MiniLM into .gpu-gguf-1, .gpu-gguf-2 and .gpu-gguf-minilm: carry each in a call \
         of its own that copies it into ~/gpu-side, before the pack's (docs/testing.md, On a GPU machine)",
        packed,
        out.display(),
        size as f64 / 1048576.0
    );
    Ok(true)
}

/// The SmolLM2 GGUF (94 MiB) cannot travel with a pack: it goes in two halves in folders of
/// their own (`.gpu-gguf-1`, `.gpu-gguf-2`), each carried by one call before the pack's;
/// `join-gguf.sh` joins them and checks them against `<pack>/models/<name>.sha256`.
pub(crate) fn pack_gguf_halves(pack: &Path) -> Result<(), String> {
    let gguf = crate::candle::smollm2_gguf()?;
    let bytes = std::fs::read(&gguf).map_err(|e| format!("{}: {e}", gguf.display()))?;
    let name = crate::candle::SMOLLM2_GGUF;
    let half = bytes.len().div_ceil(2);
    for (i, part) in bytes.chunks(half).enumerate() {
        let dir = side_dir(&(i + 1).to_string())?;
        std::fs::write(dir.join(format!("{name}.part{}", i + 1)), part)
            .map_err(|e| e.to_string())?;
    }
    let models = pack.join("models");
    std::fs::create_dir_all(&models).map_err(|e| e.to_string())?;
    let digest = crate::candle::sha256_hex(&bytes);
    std::fs::write(
        models.join(format!("{name}.sha256")),
        format!("{digest}  {name}\n"),
    )
    .map_err(|e| e.to_string())
}

/// `.gpu-gguf-<name>/` beside the pack, emptied: the models too large to travel in the pack's
/// own call (a device call carries 64 MiB), each carried by a call of its own that copies it
/// off the checkout on the GPU machine (`run.sh` takes them from there).
fn side_dir(name: &str) -> Result<std::path::PathBuf, String> {
    let dir = root().join(format!(".gpu-gguf-{name}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}
