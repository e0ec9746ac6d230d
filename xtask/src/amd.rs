//! The AMD tier: every kernel module through the real hiprtc of ROCm 6.4, the ABI tables
//! against the headers (a probe), the library symbols against the libraries, and the HIP shim's
//! check; natively where ROCm and an AMD GPU are installed, else in a Debian sid chroot.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::outcome::{run_all, run_chains, TierOutcome};
use crate::root;
use crate::tools::{is_root, run_echo, test_executables};

/// Packages with an `amd_tier` test target (feature `amd-tier`), in the order they run: the
/// emulator's last, on the code objects rocm-device's wrote.
const AMD_TIER_PACKAGES: [&str; 5] = [
    "rocm-device",
    "rocm-blas",
    "rocm-dnn",
    "rocm-ccl",
    "amdgpu-emu",
];
/// Where (inside the chroot) rocm-device's tier leaves the code objects for the emulator's.
const CODE_OBJECT_DIR: &str = "/tmp/candle-rocm-code-objects";
/// Where the AMD tier's chroot lives: outside the checkout, shared by clones and runs.
pub(crate) const CHROOT_DIR: &str = "/var/tmp/candle-rocm/sid";

/// C++ probe printing the ROCm headers' value of every ABI table entry (HIP, rocBLAS, MIOpen,
/// RCCL: rocm_device::sys holds them all).
fn abi_probe_source() -> String {
    rocm_device::sys::abi::probe_source(
        &rocm_device::sys::all_headers(),
        &rocm_device::sys::all_tables(),
    )
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

pub(crate) fn amd_tier() -> TierOutcome {
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
                    .env("CANDLE_ROCM_CODE_OBJECT_DIR", work.join("code-objects"))
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
/// platform's calls and docs/testing.md's list) to a tier's outcome as one more test.
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
    // this run's code objects only
    let _ = std::fs::remove_dir_all(chroot.join(CODE_OBJECT_DIR.trim_start_matches('/')));
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
            install(&exe, &chroot.join(&name))?;
            inside.push(format!("/{name}"));
        }
        Ok(inside)
    };
    let binaries = match prepare() {
        Ok(b) => b,
        Err(e) => return TierOutcome::Broken(e),
    };
    let emulated = match prepare_emulated(&chroot) {
        Ok(e) => e,
        Err(e) => return TierOutcome::Broken(e),
    };
    let tier = binaries.iter().map(|binary| {
        let mut c = Command::new("chroot");
        c.arg(&chroot)
            .args(["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp"])
            .arg("CANDLE_ROCM_ABI_PROBE=/tmp/candle-rocm-abi.txt")
            .arg("CANDLE_ROCM_AMD_TIER_EXPECT=no-device")
            .arg(format!("CANDLE_ROCM_CODE_OBJECT_DIR={CODE_OBJECT_DIR}"))
            .args([binary.as_str(), "--nocapture", "--test-threads=1"]);
        c
    });
    let compiled = run_all(tier);
    let TierOutcome::Ran { passed, failed } = compiled else {
        return compiled;
    };
    // then the GPU suites that run on the ISA emulator, the two architectures side by side
    // (their kernels compile through hiprtc one program at a time in a process: one
    // architecture's suites alone leave a core idle)
    let on_emulator = EMULATED_ARCHS
        .iter()
        .map(|arch| {
            emulated
                .iter()
                .map(|binary| {
                    let mut c = Command::new("chroot");
                    c.arg(&chroot)
                        .args(["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp"])
                        .arg(format!("ROCM_PATH={EMULATOR_ROCM}"))
                        .arg("CANDLE_ROCM_PLATFORM=amd")
                        .arg(format!("CANDLE_ROCM_EMU_ARCH={arch}"))
                        .arg(format!(
                            "CANDLE_ROCM_CACHE_DIR=/tmp/candle-rocm-emu-cache-{arch}"
                        ))
                        // the vendor libraries do not run on the emulator: the matmuls take the
                        // portable gemm kernel, convolutions and pooling the portable ones
                        .arg("CANDLE_ROCM_GEMM=portable")
                        .arg("CANDLE_ROCM_DISABLE_MIOPEN=1")
                        .args([binary.as_str(), "--test-threads=2"]);
                    c
                })
                .collect()
        })
        .collect();
    match run_chains(on_emulator) {
        TierOutcome::Ran {
            passed: p,
            failed: f,
        } => TierOutcome::Ran {
            passed: passed + p,
            failed: failed + f,
        },
        other => other,
    }
}

/// The GPU test binaries the AMD tier runs on the ISA emulator (`crates/amdgpu-emu-hip`, a
/// libamdhip64 it serves, beside the chroot's real hiprtc): (package, test target). The
/// elementwise suite covers most of the vector ALU and memory; the matrix probes MFMA and WMMA
/// against the vendors' layouts, their int8 forms too; rocm-blas's suite the portable gemm
/// kernel.
const EMULATED_SUITES: [(&str, &str); 4] = [
    ("rocm-elementwise", "gpu"),
    ("rocm-attention", "matrix"),
    ("rocm-quantized", "int8_tiles"),
    ("rocm-blas", "gpu"),
];
/// The architectures emulated: RDNA3 (wave32, WMMA) and CDNA3 (wave64, MFMA).
const EMULATED_ARCHS: [&str; 2] = ["gfx1100", "gfx942"];
/// The `ROCM_PATH` inside the chroot whose lib/ holds the emulator's libamdhip64.
const EMULATOR_ROCM: &str = "/tmp/candle-rocm-emu";

/// Builds the emulator's libamdhip64 and the suites' test binaries and copies them into the
/// chroot (libhiprtc beside it is ROCm's own); the binaries' paths inside.
fn prepare_emulated(chroot: &Path) -> Result<Vec<String>, String> {
    let (ok, _) = run_echo(crate::tools::cargo().args(["build", "-p", "amdgpu-emu-hip"]))?;
    if !ok {
        return Err("building the emulator's libamdhip64 failed".into());
    }
    let lib = chroot
        .join(EMULATOR_ROCM.trim_start_matches('/'))
        .join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| e.to_string())?;
    let built = root().join("target/debug/libamdhip64.so");
    install(&built, &lib.join("libamdhip64.so"))?;
    let hiprtc = lib.join("libhiprtc.so");
    let _ = std::fs::remove_file(&hiprtc);
    std::os::unix::fs::symlink("/usr/lib/x86_64-linux-gnu/libhiprtc.so.6", &hiprtc)
        .map_err(|e| e.to_string())?;
    let mut inside = Vec::new();
    for (package, target) in EMULATED_SUITES {
        let exes = test_executables(&["-p", package, "--features", "gpu-tests", "--test", target])?;
        let (_, exe) = exes
            .into_iter()
            .find(|(n, _)| n.ends_with(&format!("/{target}")))
            .ok_or_else(|| format!("no {target} test binary in {package}"))?;
        let name = format!("tmp/candle-rocm-emulated-{package}-{target}");
        install(&exe, &chroot.join(&name))?;
        inside.push(format!("/{name}"));
    }
    Ok(inside)
}

/// Copies `src` to `dst` through a temporary name and a rename, so a process still running the
/// old file (a test binary, the emulator's library) keeps it whole.
fn install(src: &Path, dst: &Path) -> Result<(), String> {
    let tmp = dst.with_extension("new");
    std::fs::copy(src, &tmp).map_err(|e| format!("{}: {e}", src.display()))?;
    std::fs::rename(&tmp, dst).map_err(|e| format!("{}: {e}", dst.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
