//! The verification tiers (README, "The two commands": the table of tiers) and the GPU pack.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::root;

/// NVRTC for the compile tier: the CUDA 13.0 wheel (no CUDA install needed).
const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc==13.0.88";
/// The cargo features that put every crate on the nvidia platform (GPU tier and pack).
const NVIDIA_FEATURES: &str =
    "rocm-device/nvidia,rocm-elementwise/nvidia,rocm-blas/nvidia,rocm-reduce/nvidia,rocm-indexing/nvidia,rocm-dnn/nvidia,rocm-quantized/nvidia,rocm-ccl/nvidia,candle-rocm/nvidia";
/// The features that build every crate's GPU test target.
const GPU_TEST_FEATURES: &str =
    "rocm-device/gpu-tests,rocm-elementwise/gpu-tests,rocm-blas/gpu-tests,rocm-reduce/gpu-tests,rocm-indexing/gpu-tests,rocm-dnn/gpu-tests,rocm-quantized/gpu-tests,rocm-ccl/gpu-tests,candle-rocm/gpu-tests";
/// Packages with an `amd_tier` test target (feature `amd-tier`).
const AMD_TIER_PACKAGES: [&str; 4] = ["rocm-device", "rocm-blas", "rocm-dnn", "rocm-ccl"];
/// Where the AMD tier's chroot lives: outside the checkout, shared by clones and runs.
const CHROOT_DIR: &str = "/var/tmp/candle-rocm/sid";

#[derive(Default)]
struct Tally {
    passed: u64,
    failed: u64,
    lines: Vec<String>,
}

impl Tally {
    fn tier(&mut self, name: &str, outcome: TierOutcome) {
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
        println!("\n>>> {line}\n");
        self.lines.push(line);
    }
}

enum TierOutcome {
    Ran { passed: u64, failed: u64 },
    Broken(String),
    Skipped(String),
}

/// Sums libtest's `test result:` lines.
fn count_results(output: &str) -> (u64, u64) {
    let mut totals = (0, 0);
    for line in output.lines().filter(|l| l.contains("test result:")) {
        let num = |word: &str| {
            line.split(';')
                .find(|part| part.trim_end().ends_with(word))
                .and_then(|part| part.split_whitespace().rev().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        totals.0 += num("passed");
        totals.1 += num("failed");
    }
    totals
}

/// Runs a command, echoing its output, and returns (success, stdout + stderr).
/// Packs the folders `dirs` of `out` into `out/binaries.tar.xz` (all cores); whether tar
/// succeeded.
pub(crate) fn compress_binaries(out: &Path, dirs: &[&str]) -> Result<bool, String> {
    let (ok, _) = run_echo(
        Command::new("tar")
            // -9: a 64 MiB dictionary, so the test binaries share what they have in common
            .env("XZ_OPT", "-9")
            .arg("-cJf")
            .arg(out.join("binaries.tar.xz"))
            .arg("-C")
            .arg(out)
            .args(dirs),
    )?;
    Ok(ok)
}

pub(crate) fn run_echo(cmd: &mut Command) -> Result<(bool, String), String> {
    let shown = format!("{cmd:?}");
    println!("$ {shown}");
    let out = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{text}");
    Ok((out.status.success(), text))
}

pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn outcome_of(result: Result<(bool, String), String>) -> TierOutcome {
    match result {
        Err(e) => TierOutcome::Broken(e),
        Ok((ok, text)) => {
            let (passed, failed) = count_results(&text);
            if !ok && failed == 0 {
                TierOutcome::Broken("the command failed before reporting tests (see above)".into())
            } else if passed + failed == 0 {
                TierOutcome::Broken("no test ran".into())
            } else {
                TierOutcome::Ran { passed, failed }
            }
        }
    }
}

/// The executables of one `cargo test --no-run` invocation, with their target names.
fn test_executables(args: &[&str]) -> Result<Vec<(String, PathBuf)>, String> {
    test_executables_of(cargo(), args)
}

/// [`test_executables`] for a `cargo` command of another workspace.
fn test_executables_of(
    mut cargo: Command,
    args: &[&str],
) -> Result<Vec<(String, PathBuf)>, String> {
    let out = cargo
        .args(["test", "--no-run", "--message-format=json"])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err("building the test binaries failed".into());
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(exe) = json_str(line, "\"executable\":\"") else {
            continue;
        };
        // `cargo test` also builds examples; only test harnesses belong in the list.
        if line.contains("\"kind\":[\"example\"]") {
            continue;
        }
        let name = json_str(line, "\"name\":\"").unwrap_or_default();
        // the crate's directory name, so packed binaries say whose tests they are
        let package = json_str(line, "\"manifest_path\":\"")
            .and_then(|m| {
                PathBuf::from(m)
                    .parent()
                    .and_then(|d| d.file_name())
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        exes.push((format!("{package}/{name}"), PathBuf::from(exe)));
    }
    Ok(exes)
}

/// The string value following `key` in one line of cargo's JSON (paths hold no quotes).
fn json_str(line: &str, key: &str) -> Option<String> {
    let start = line.find(key)? + key.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_string())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub(crate) fn tools_dir() -> PathBuf {
    root().join("target").join("tools")
}

/// `pip install --no-deps --upgrade --target <target> <wheels>`; returns whether pip succeeded.
pub(crate) fn pip_install_into(target: &Path, wheels: &[&str]) -> Result<bool, String> {
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .ok_or("python3 is needed to install wheels from PyPI")?;
    let (ok, _) = run_echo(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--upgrade",
                "--target",
            ])
            .arg(target)
            .args(wheels),
    )?;
    Ok(ok)
}

/// Downloads `spec` (`name==version`, a wheel, or an sdist with `--no-binary <name>` in
/// `extra`) from PyPI into target/tools/wheels, where pip leaves a file already there alone;
/// returns that folder.
pub(crate) fn pip_download(spec: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let wheels = tools_dir().join("wheels");
    std::fs::create_dir_all(&wheels).map_err(|e| e.to_string())?;
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
        ])
        .args(extra)
        .arg("-d")
        .arg(&wheels)
        .arg(spec)
        .status()
        .map_err(|e| format!("python3 -m pip: {e}"))?;
    if !status.success() {
        return Err(format!("pip could not download {spec}"));
    }
    Ok(wheels)
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

fn with_ld_path(cmd: &mut Command, dir: &Path) {
    let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    cmd.env(
        "LD_LIBRARY_PATH",
        if old.is_empty() {
            dir.display().to_string()
        } else {
            format!("{}:{old}", dir.display())
        },
    );
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

/// C++ probe printing the ROCm headers' value of every ABI table entry (HIP, rocBLAS, MIOpen).
fn abi_probe_source() -> String {
    let headers: Vec<&str> = [
        rocm_device::amd_abi::HEADERS,
        rocm_blas::rocblas::abi::HEADERS,
        rocm_dnn::miopen::abi::HEADERS,
        rocm_ccl::library::abi::HEADERS,
    ]
    .concat();
    let tables: Vec<&[rocm_device::abi::AbiValue]> = [
        rocm_device::amd_abi::TABLES,
        &[rocm_blas::rocblas::abi::TABLE],
        rocm_dnn::miopen::abi::TABLES,
        &[rocm_ccl::library::abi::TABLE],
    ]
    .concat();
    rocm_device::abi::probe_source(&headers, &tables)
}

/// Where this machine's AMD tier runs: natively where ROCm and an AMD GPU are installed, else
/// in the Debian sid chroot (as root on Linux), else nowhere.
enum AmdTierHost {
    /// ROCm's include folder.
    Native(PathBuf),
    Chroot,
}

fn amd_tier_host() -> Result<AmdTierHost, String> {
    let rocm =
        std::env::var_os("ROCM_PATH").map_or_else(|| PathBuf::from("/opt/rocm"), PathBuf::from);
    if Path::new("/dev/kfd").exists() && rocm.join("include/hip/hiprtc.h").exists() {
        return Ok(AmdTierHost::Native(rocm.join("include")));
    }
    if !cfg!(target_os = "linux") {
        return Err("needs Linux".into());
    }
    if !is_root() {
        return Err("needs root to build and enter the chroot".into());
    }
    Ok(AmdTierHost::Chroot)
}

/// Builds the probe against `include` and writes its output to `dest`.
fn run_abi_probe(work: &Path, include: &Path, dest: &Path) -> Result<(), String> {
    // C++: miopen.h names a struct without its `struct` tag.
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    std::fs::write(work.join("abi_probe.cpp"), abi_probe_source()).map_err(|e| e.to_string())?;
    let (ok, _) = run_echo(
        Command::new("c++")
            .arg("-D__HIP_PLATFORM_AMD__")
            .arg(format!("-I{}", include.display()))
            .arg(work.join("abi_probe.cpp"))
            .arg("-o")
            .arg(work.join("abi_probe")),
    )?;
    if !ok {
        return Err("the ABI probe did not compile against the ROCm headers".into());
    }
    let out = Command::new(work.join("abi_probe"))
        .output()
        .map_err(|e| e.to_string())?;
    std::fs::write(dest, &out.stdout).map_err(|e| e.to_string())
}

/// The `amd_tier` test binary of each package.
fn amd_tier_binaries() -> Result<Vec<PathBuf>, String> {
    let mut binaries = Vec::new();
    for package in AMD_TIER_PACKAGES {
        let exes = test_executables(&[
            "-p",
            package,
            "--features",
            "amd-tier",
            "--test",
            "amd_tier",
        ])?;
        let (_, exe) = exes
            .into_iter()
            .find(|(n, _)| n.ends_with("/amd_tier"))
            .ok_or_else(|| format!("no amd_tier test binary in {package}"))?;
        binaries.push(exe);
    }
    Ok(binaries)
}

fn amd_tier() -> TierOutcome {
    let host = match amd_tier_host() {
        Ok(h) => h,
        Err(why) => return TierOutcome::Skipped(why),
    };
    let work = root().join("target").join("amd-tier");
    match host {
        AmdTierHost::Native(include) => {
            let probe = work.join("abi.txt");
            let binaries =
                match run_abi_probe(&work, &include, &probe).and_then(|()| amd_tier_binaries()) {
                    Ok(b) => b,
                    Err(e) => return TierOutcome::Broken(e),
                };
            let outcome = run_all(binaries.into_iter().map(|binary| {
                let mut c = Command::new(binary);
                c.env("CANDLE_ROCM_ABI_PROBE", &probe)
                    .env("CANDLE_ROCM_AMD_TIER_EXPECT", "device")
                    .args(["--nocapture", "--test-threads=1"]);
                c
            }));
            with_shim_check(outcome, &include, &work)
        }
        AmdTierHost::Chroot => {
            let outcome = chroot_amd_tier(&work);
            with_shim_check(
                outcome,
                &PathBuf::from(CHROOT_DIR).join("usr/include"),
                &work,
            )
        }
    }
}

/// Adds the HIP shim's check (built against `include`, entry points equal to the amd
/// platform's calls and README's list) to a tier's outcome as one more test.
fn with_shim_check(outcome: TierOutcome, include: &Path, work: &Path) -> TierOutcome {
    let shim_ok = match crate::shim::check(include, work) {
        Ok(line) => {
            println!("{line}");
            true
        }
        Err(why) => {
            println!("HIP shim check FAILED: {why}");
            false
        }
    };
    match outcome {
        TierOutcome::Ran { passed, failed } if shim_ok => TierOutcome::Ran {
            passed: passed + 1,
            failed,
        },
        TierOutcome::Ran { passed, failed } => TierOutcome::Ran {
            passed,
            failed: failed + 1,
        },
        other => other,
    }
}

fn chroot_amd_tier(work: &Path) -> TierOutcome {
    let script = root().join("xtask").join("scripts").join("amd-chroot.sh");
    println!("AMD tier: preparing the ROCm chroot at {CHROOT_DIR} (first time: about a minute)");
    match run_echo(Command::new("bash").arg(&script).arg(CHROOT_DIR)) {
        Ok((true, _)) => {}
        Ok((false, _)) => return TierOutcome::Broken("building the ROCm chroot failed".into()),
        Err(e) => return TierOutcome::Broken(e),
    }
    let chroot = PathBuf::from(CHROOT_DIR);
    // The probe is built on the host with the chroot's headers; every package's `amd_tier`
    // test binary runs inside the chroot.
    let prepare = || -> Result<Vec<String>, String> {
        run_abi_probe(
            work,
            &chroot.join("usr/include"),
            &chroot.join("tmp/candle-rocm-abi.txt"),
        )?;
        let mut inside = Vec::new();
        for (package, exe) in AMD_TIER_PACKAGES.iter().zip(amd_tier_binaries()?) {
            let name = format!("tmp/candle-rocm-amd-tier-{package}");
            std::fs::copy(&exe, chroot.join(&name)).map_err(|e| e.to_string())?;
            inside.push(format!("/{name}"));
        }
        Ok(inside)
    };
    let binaries = match prepare() {
        Ok(b) => b,
        Err(e) => return TierOutcome::Broken(e),
    };
    run_all(binaries.iter().map(|binary| {
        let mut c = Command::new("chroot");
        c.arg(&chroot)
            .args(["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp"])
            .arg("CANDLE_ROCM_ABI_PROBE=/tmp/candle-rocm-abi.txt")
            .arg("CANDLE_ROCM_AMD_TIER_EXPECT=no-device")
            .args([binary.as_str(), "--nocapture", "--test-threads=1"]);
        c
    }))
}

/// Runs every command (test binaries of one tier) and sums their results.
fn run_all(commands: impl Iterator<Item = Command>) -> TierOutcome {
    let mut all = String::new();
    let mut all_ok = true;
    for mut command in commands {
        match run_echo(&mut command) {
            Ok((ok, text)) => {
                all_ok &= ok;
                all += &text;
            }
            Err(e) => return TierOutcome::Broken(e),
        }
    }
    outcome_of(Ok((all_ok, all)))
}

/// Candle's test binaries that hold device tests (`test_device!`, the transfer tests), and
/// the e2e GPU suites: packed for the GPU machine, where they run on `Device::Rocm`.
const CANDLE_DEVICE_TESTS: [&str; 13] = [
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
];
/// The packages of the materialised workspace whose tests run: in the CPU tier and, for
/// their device tests, in the GPU pack.
const CANDLE_TEST_PACKAGES: [&str; 6] = [
    "-p",
    "candle-core",
    "-p",
    "candle-nn",
    "-p",
    "candle-rocm-e2e",
];
/// Features of the materialised workspace for Candle's tests on the nvidia platform.
const CANDLE_NVIDIA_FEATURES: &str =
    "candle-core/rocm-gpu-tests,candle-nn/rocm-gpu-tests,candle-rocm-e2e/gpu-tests,candle-rocm/nvidia";

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
    // `bf16_lfm_op_timings` times ops for two minutes in a debug build; it checks no result.
    let tests = run_echo(
        crate::candle::cargo_in_workspace()
            .arg("test")
            .args(CANDLE_TEST_PACKAGES)
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

/// A tier that a flag can skip: (name, flag, runner).
type OptionalTier = (&'static str, &'static str, fn() -> TierOutcome);

/// `cargo xtask test [--skip-amd] [--skip-nvrtc] [--skip-candle]`.
pub fn test(args: &[String]) -> Result<bool, String> {
    let mut tally = Tally::default();
    // (a) unit tests of the whole workspace
    tally.tier(
        "unit (cargo test --workspace)",
        outcome_of(run_echo(cargo().args(["test", "--workspace"]))),
    );
    // (b) NVRTC compile tier, (c) AMD tier (native or in the ROCm chroot), Candle's tests on
    // the CPU; each can be skipped by flag.
    let optional: [OptionalTier; 3] = [
        ("NVRTC compile (sm_90)", "--skip-nvrtc", nvrtc_tier),
        (
            "AMD (hiprtc and the ROCm 6.4 libraries)",
            "--skip-amd",
            amd_tier,
        ),
        ("Candle 0.11.1 patched (CPU)", "--skip-candle", candle_tier),
    ];
    for (name, flag, run) in optional {
        let outcome = if args.iter().any(|a| a == flag) {
            TierOutcome::Skipped(flag.into())
        } else {
            run()
        };
        tally.tier(name, outcome);
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
            tally.tier("GPU", outcome_of(run_echo(&mut cmd)));
        }
        None => tally.tier(
            "GPU",
            TierOutcome::Skipped(
                "no GPU on this machine; run cargo xtask gpu-pack and bash .gpu/run.sh on one"
                    .into(),
            ),
        ),
    }
    println!("== tiers ==");
    for line in &tally.lines {
        println!("  {line}");
    }
    println!("{} passed, {} failed", tally.passed, tally.failed);
    Ok(tally.failed == 0)
}

/// The GPU pack's runner (`.gpu/run.sh`).
const RUN_SH: &str = include_str!("../scripts/gpu-run.sh");
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
                &CANDLE_TEST_PACKAGES,
                &["--features", CANDLE_NVIDIA_FEATURES],
            ]
            .concat(),
        )?
        .into_iter()
        .filter(|(n, _)| CANDLE_DEVICE_TESTS.contains(&n.as_str())),
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
    let (ok, _) = run_echo(
        Command::new(&demo_bin)
            .arg("--export-f16")
            .arg(crate::candle::minilm_dir()?)
            .arg(out.join("models").join("all-MiniLM-L6-v2")),
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
        "packed {} test binaries and the demos into {} ({:.1} MiB); the GGUF halves into \
         .gpu-gguf-1 and .gpu-gguf-2: carry each in a call of its own before the pack's",
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
        let dir = root().join(format!(".gpu-gguf-{}", i + 1));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
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

/// The bytes of the files under `dir`; an error past 60 MiB, as the GPU machine takes at most
/// 64 MiB.
pub(crate) fn checked_pack_size(dir: &Path) -> Result<u64, String> {
    fn walk(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => walk(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    let size = walk(dir);
    if size > 60 << 20 {
        return Err(format!(
            "{} holds {:.1} MiB; the GPU machine takes at most 64 MiB",
            dir.display(),
            size as f64 / 1048576.0
        ));
    }
    Ok(size)
}

pub(crate) fn strip(path: &Path) -> Result<(), String> {
    match Command::new("strip").arg(path).status() {
        Ok(s) if s.success() => Ok(()),
        _ => {
            println!(
                "note: strip unavailable, {} left unstripped",
                path.display()
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_counted() {
        let out = "test result: ok. 19 passed; 0 failed; 0 ignored\nnoise\n\
                   test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured\n";
        assert_eq!(count_results(out), (22, 1));
        assert_eq!(count_results("nothing here"), (0, 0));
    }

    #[test]
    fn a_failed_command_without_results_is_a_broken_tier() {
        assert!(matches!(
            outcome_of(Ok((false, "error: could not compile".into()))),
            TierOutcome::Broken(_)
        ));
        assert!(matches!(
            outcome_of(Ok((true, String::new()))),
            TierOutcome::Broken(_)
        ));
        assert!(matches!(
            outcome_of(Ok((
                false,
                "test result: FAILED. 1 passed; 2 failed;".into()
            ))),
            TierOutcome::Ran {
                passed: 1,
                failed: 2
            }
        ));
    }

    #[test]
    fn the_abi_probe_names_every_checked_field() {
        let src = abi_probe_source();
        for key in [
            "hipErrorNoDevice",
            "offsetof(hipDeviceProp_tR0600, gcnArchName)",
            "sizeof(hipDeviceProp_tR0600)",
        ] {
            assert!(src.contains(key), "{key}");
        }
    }

    #[test]
    fn cargo_json_paths_are_extracted() {
        let line = r#"{"reason":"compiler-artifact","target":{"name":"gpu","kind":["test"]},"executable":"/x/target/debug/deps/gpu-1234"}"#;
        assert_eq!(
            json_str(line, "\"executable\":\"").as_deref(),
            Some("/x/target/debug/deps/gpu-1234")
        );
        assert_eq!(json_str(line, "\"name\":\"").as_deref(), Some("gpu"));
    }
}
