//! The AMD tier: run by `cargo xtask test` inside the Debian sid chroot that holds ROCm 6.4
//! (no AMD GPU there). Every kernel module goes through the production hiprtc path for two
//! wave64 and two wave32 archs; the loader must report "no device" as a typed error; the
//! ABI values the amd platform passes must equal the ROCm headers'.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rocm_device::{compile::compile_for_arch, Device, Error, Platform};
use rocm_kernels as kernels;

/// CDNA (wave64) and RDNA (wave32) targets.
const ARCHS: [&str; 4] = ["gfx90a", "gfx942", "gfx1100", "gfx1201"];

/// The archs a child process of `every_module_compiles_through_hiprtc_for_wave64_and_wave32`
/// compiles (comma list); unset in the parent.
const CHILD_ARCHS_ENV: &str = "CANDLE_ROCM_AMD_TIER_ARCHS";

#[test]
fn every_module_compiles_through_hiprtc_for_wave64_and_wave32() {
    if let Ok(archs) = std::env::var(CHILD_ARCHS_ENV) {
        return archs.split(',').for_each(every_module_compiles_for);
    }
    let version = Platform::Amd
        .compiler_version()
        .expect("hiprtc must load in the AMD tier");
    println!("compiler: {version}");
    // hiprtc compiles one program at a time in a process (threads do not overlap): the archs
    // go to child processes, one a core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let groups: Vec<Vec<&str>> = (0..cores.min(ARCHS.len()))
        .map(|g| ARCHS.iter().copied().skip(g).step_by(cores).collect())
        .collect();
    // argv[0]: the chroot has no /proc for current_exe
    let exe = std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(Into::into))
        .expect("the test binary's path");
    let children: Vec<_> = groups
        .iter()
        .map(|archs| {
            let child = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "every_module_compiles_through_hiprtc_for_wave64_and_wave32",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ARCHS_ENV, archs.join(","))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("starting the child for {archs:?}: {e}"));
            (archs, child)
        })
        .collect();
    let mut failed = Vec::new();
    for (archs, child) in children {
        let out = child.wait_with_output().unwrap();
        // the child's own lines: its libtest summary would count twice in the tier's sum
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in stdout.lines() {
            let line = line.rsplit(" ... ").next().unwrap_or(line);
            let framing = line.is_empty()
                || line == "ok"
                || line.starts_with("running ")
                || line.contains("test result:");
            if !framing {
                println!("{line}");
            }
        }
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            failed.push(archs.join(","));
        }
    }
    assert!(
        failed.is_empty(),
        "the compiles for {failed:?} failed (above)"
    );
}

/// Every tier module through hiprtc for `arch`: an ELF code object exporting exactly the
/// module's table.
fn every_module_compiles_for(arch: &str) {
    for module in common::tier_modules() {
        let compiled = compile_for_arch(Platform::Amd, module, arch, &[], None)
            .unwrap_or_else(|e| panic!("{} for {arch}: {e}", module.name));
        assert!(
            common::is_elf(&compiled.image),
            "{} for {arch}: not an ELF code object",
            module.name
        );
        let (missing, unlisted) =
            rocm_device::code_object::compare_with_table(module, &compiled.image).unwrap();
        assert!(
            missing.is_empty(),
            "{} for {arch} lacks {missing:?}",
            module.name
        );
        assert!(
            unlisted.is_empty(),
            "{} for {arch} exports kernels its table does not list: {unlisted:?}",
            module.name
        );
        // kept for the emulator's tier, which loads and decodes them
        if let Some(dir) = std::env::var_os("CANDLE_ROCM_CODE_OBJECT_DIR") {
            let dir = std::path::Path::new(&dir).join(arch);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{}.co", module.name)), &compiled.image).unwrap();
        }
        println!(
            "AMD tier: {arch:8} {:10} {:4} entry points {:8} bytes {:6.0} ms",
            module.name,
            module.entry_points().count(),
            compiled.image.len(),
            compiled.elapsed.as_secs_f64() * 1e3
        );
    }
}

#[test]
fn a_compile_error_comes_back_with_the_log() {
    let bad = rocm_kernels_bad_module();
    let err = compile_for_arch(Platform::Amd, &bad, "gfx942", &[], None).unwrap_err();
    match err {
        Error::Compile { module, arch, log } => {
            assert_eq!((module.as_str(), arch.as_str()), ("broken", "gfx942"));
            assert!(log.contains("undeclared_thing"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other}"),
    }
}

#[test]
fn integer_dot_products_are_native_on_every_target() {
    // CANDLE_ROCM_DOT4_NATIVE is defined where compat.h picked a dot4 instruction, not the
    // byte-at-a-time fallback, for the arch being compiled.
    let probe = kernels::KernelModule {
        name: "dot4_probe",
        source: "#ifndef CANDLE_ROCM_DOT4_NATIVE\n#error no dot4 instruction\n#endif\n\
                 KERNEL void dot4_probe(int* x) { x[0] = dot4_i8(x[1], x[2], x[3]); }",
        groups: &[kernels::EntryGroup {
            ops: &["dot4"],
            dtypes: &["probe"],
        }],
        params: &[],
        headers: kernels::HEADERS,
    };
    for arch in ARCHS {
        let compiled = compile_for_arch(Platform::Amd, &probe, arch, &[], None)
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        let symbols = rocm_device::code_object::kernel_symbols(&compiled.image).unwrap();
        assert!(
            symbols.iter().any(|s| s == "dot4_probe"),
            "{arch}: {symbols:?}"
        );
    }
}

#[test]
fn matrix_units_are_the_arch_own_on_every_target() {
    // compat.h picks MFMA on CDNA, WMMA (gfx11 or gfx12 form) on RDNA3/4: the probe fails to
    // compile where another form (or none) was picked, and runs the tile operation once.
    for arch in ARCHS {
        let base = arch.split(':').next().unwrap_or(arch);
        let want = match base {
            "gfx90a" | "gfx942" | "gfx950" => "CANDLE_ROCM_MMA_MFMA",
            a if a.starts_with("gfx11") => "CANDLE_ROCM_MMA_WMMA11",
            a if a.starts_with("gfx12") => "CANDLE_ROCM_MMA_WMMA12",
            _ => continue,
        };
        let source = format!(
            "#ifndef {want}\n#error compat.h picked another matrix form\n#endif\n\
             KERNEL void mma_probe(const u32* a, float* c) {{\n\
             u32 fa[MMA_A / 2], fb[MMA_B / 2]; float acc[MMA_C] = {{}};\n\
             for (int w = 0; w < MMA_A / 2; ++w) fa[w] = a[w]; for (int w = 0; w < MMA_B / 2; ++w) fb[w] = a[w];\n\
             mma_16x16x16<f16_t>(fa, fb, acc); for (int e = 0; e < MMA_C; ++e) c[e] = acc[e]; }}"
        );
        let probe = kernels::KernelModule {
            name: "mma_probe",
            source: Box::leak(source.into_boxed_str()),
            groups: &[kernels::EntryGroup {
                ops: &["mma"],
                dtypes: &["probe"],
            }],
            params: &[],
            headers: kernels::HEADERS,
        };
        let compiled = compile_for_arch(Platform::Amd, &probe, arch, &[], None)
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        let symbols = rocm_device::code_object::kernel_symbols(&compiled.image).unwrap();
        assert!(
            symbols.iter().any(|s| s == "mma_probe"),
            "{arch}: {symbols:?}"
        );
        println!("AMD tier: {arch} matrix units through {want}");
    }
}

fn rocm_kernels_bad_module() -> kernels::KernelModule {
    kernels::KernelModule {
        name: "broken",
        source: "KERNEL void k(float* x) { x[0] = undeclared_thing; }",
        groups: &[],
        params: &[],
        headers: kernels::HEADERS,
    }
}

/// What this run of the tier must find: `no-device` in the chroot (ROCm without a GPU),
/// `device` on a machine with an AMD GPU (`cargo xtask test` sets it).
fn expects_a_device() -> bool {
    match std::env::var("CANDLE_ROCM_AMD_TIER_EXPECT").as_deref() {
        Ok("device") => true,
        Ok("no-device") => false,
        other => panic!("CANDLE_ROCM_AMD_TIER_EXPECT must be device or no-device, got {other:?}"),
    }
}

#[test]
fn the_loader_finds_the_device_or_reports_none_cleanly() {
    for lib in Platform::Amd.libraries() {
        assert!(
            lib.found.is_some(),
            "{} not found; tried {:?}",
            lib.role,
            lib.tried
        );
    }
    if expects_a_device() {
        let n = Platform::Amd.device_count().expect("an AMD device");
        assert!(n > 0);
        let d = Device::with_platform(Platform::Amd, 0).expect("device 0 opens");
        let info = d.info();
        println!("AMD device: {info:?}");
        assert!(info.arch.starts_with("gfx"), "{info:?}");
        assert!(info.warp_size == 32 || info.warp_size == 64, "{info:?}");
        return;
    }
    match Platform::Amd.device_count() {
        Err(Error::NoDevice {
            platform: Platform::Amd,
            detail,
        }) => println!("no device: {detail}"),
        other => panic!("expected NoDevice, got {other:?}"),
    }
    let err = Device::with_platform(Platform::Amd, 0).unwrap_err();
    assert!(matches!(err, Error::NoDevice { .. }), "{err}");
    assert!(err.to_string().starts_with("no amd device"), "{err}");
}

#[test]
fn abi_values_match_the_rocm_headers() {
    // `<expression> <value>` lines printed by a probe built against the ROCm headers.
    let path = std::env::var("CANDLE_ROCM_ABI_PROBE")
        .expect("CANDLE_ROCM_ABI_PROBE names the probe output");
    let text = std::fs::read_to_string(&path).expect("probe output readable");
    let checked = rocm_device::abi::check_against_probe(rocm_device::sys::hip::abi::TABLES, &text)
        .unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    println!("AMD tier: {checked} ABI values equal the ROCm headers'");
}
