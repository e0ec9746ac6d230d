//! `candle-rocm-bench`: Candle on Device::Rocm against Candle's CUDA backend (built with the
//! `cuda` feature) in one process, op by op and on a llama model; the torch peers and the
//! report live in `bench/`, and `cargo xtask bench-pack` packs it all for the GPU machine.
//!
//! ```text
//! candle-rocm-bench ops [--quick] [--devices rocm,cuda] [--only OP]
//! candle-rocm-bench model --device rocm|cuda|none [--dtype bf16|f32] [--repeats N] [--logits F]
//!                         [--save-weights F] [--save-config F]
//! candle-rocm-bench launch
//! candle-rocm-bench decode --device rocm|cuda [--dtype bf16|f32] [--passes N] [--profile]
//! candle-rocm-bench gguf-write --shape 1b|8b|30b-a3b --type q4_0|q4k|q6k|q8_0 --tokenizer-from F --out F
//!                              [--layers N] [--context N]
//! candle-rocm-bench gguf --device rocm|cuda --file F [--prompt 512] [--decode 128] [--static]
//!   (a qwen3moe file runs through quantized_qwen3_moe, --dtype bf16|f32 (f32) its activations;
//!    --static: the static llama with a
//!    captured decode step instead of quantized_llama; --batches 1,4,16 (with --static): that
//!    many sequences decoding together, each after a prompt of its own, aggregate tokens/s;
//!    --profile [--quantized-llama]: a short run for ncu, the static llama eagerly or
//!    quantized_llama's steps inside the CUDA profiler's range; CANDLE_ROCM_HOST_TIME=1: the
//!    host's time of a decode step by category)
//! ```
//! Results are JSON lines on stdout; progress goes to stderr.

mod gguf;
mod launch;
mod model;
mod ops;
mod timing;

use candle_core::{DType, Device};
use candle_rocm_e2e::DemoResult;

/// The seed of the model's weights (every device and torch load the same ones).
const MODEL_SEED: u64 = 2026;

fn open(name: &str) -> DemoResult<Device> {
    match name {
        "rocm" => Ok(Device::new_rocm(0)?),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Device::new_cuda(0)?),
        other => Err(format!(
            "unknown device {other:?} (rocm{})",
            if cfg!(feature = "cuda") {
                ", cuda"
            } else {
                "; cuda needs the `cuda` feature"
            }
        )
        .into()),
    }
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// `--dtype bf16|f32` (default bf16).
fn dtype_flag(args: &[String]) -> DemoResult<DType> {
    match flag_value(args, "--dtype").unwrap_or("bf16") {
        "bf16" => Ok(DType::BF16),
        "f32" => Ok(DType::F32),
        other => Err(format!("--dtype {other}: bf16 or f32").into()),
    }
}

fn run(args: &[String]) -> DemoResult<()> {
    match args.first().map(String::as_str) {
        Some("ops") => {
            let default = if cfg!(feature = "cuda") {
                "rocm,cuda"
            } else {
                "rocm"
            };
            let mut devices = Vec::new();
            for name in flag_value(args, "--devices").unwrap_or(default).split(',') {
                let name: &'static str = match name {
                    "rocm" => "rocm",
                    "cuda" => "cuda",
                    other => return Err(format!("--devices: unknown device {other:?}").into()),
                };
                devices.push((name, open(name)?));
            }
            let quick = args.iter().any(|a| a == "--quick");
            ops::run(&devices, quick, flag_value(args, "--only"))?;
        }
        Some("model") => {
            let device = flag_value(args, "--device").unwrap_or("rocm");
            let repeats = flag_value(args, "--repeats").map_or(Ok(3), str::parse)?;
            let dtype = dtype_flag(args)?;
            let config = model::config();
            let weights = model::weights(&config, MODEL_SEED)?;
            if let Some(path) = flag_value(args, "--save-weights") {
                candle_core::safetensors::save(&weights, path)?;
            }
            if let Some(path) = flag_value(args, "--save-config") {
                std::fs::write(path, model::config_json(&config, repeats).to_string())?;
            }
            // `--device none` only writes the files, for the torch peer
            if device != "none" {
                let dev = open(device)?;
                let result = model::run_on(&config, &weights, dtype, &dev, repeats)?;
                if let Some(path) = flag_value(args, "--logits") {
                    let bytes: Vec<u8> = result
                        .first_logits
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect();
                    std::fs::write(path, bytes)?;
                }
                println!("{}", model::report(device, dtype, &config, &result));
            }
        }
        Some("launch") => {
            #[cfg(feature = "cuda")]
            let cuda = Some(open("cuda")?);
            #[cfg(not(feature = "cuda"))]
            let cuda: Option<Device> = None;
            launch::run(cuda.as_ref())?;
        }
        Some("decode") => {
            // decode throughput of candle-transformers' llama, and on rocm of the static-shape
            // llama eagerly and replaying a captured step; tokens against the first run's
            let device = flag_value(args, "--device").unwrap_or("rocm");
            let passes = flag_value(args, "--passes").map_or(Ok(2), str::parse)?;
            let dtype = dtype_flag(args)?;
            let config = model::config();
            let weights = model::weights(&config, MODEL_SEED)?;
            let dev = open(device)?;
            if args.iter().any(|a| a == "--profile") {
                model::profile_static(&config, &weights, dtype, &dev)?;
                return Ok(());
            }
            for pass in 1..=passes {
                let llama = model::run_on(&config, &weights, dtype, &dev, 1)?;
                let mut line = model::report(device, dtype, &config, &llama);
                line["bench"] = "decode".into();
                line["variant"] = "candle-transformers llama".into();
                line["pass"] = pass.into();
                println!("{line}");
                if device == "rocm" {
                    let eager = model::run_static(&config, &weights, (dtype, None), &dev, false, true)?;
                    let mut line = model::static_report(device, "static llama, eager", dtype, &eager, &llama.tokens);
                    line["pass"] = pass.into();
                    println!("{line}");
                    let captured = model::run_static(&config, &weights, (dtype, None), &dev, true, true)?;
                    let mut line = model::static_report(device, "static llama, captured step replayed", dtype, &captured, &eager.tokens);
                    line["pass"] = pass.into();
                    line["first_logits_equal_to_eager"] = (captured.first_logits == eager.first_logits).into();
                    println!("{line}");
                    // the attention as separate ops (gemm, mask, softmax, gemm): what the fused
                    // kernel bought
                    let unfused = model::run_static(&config, &weights, (dtype, None), &dev, true, false)?;
                    let mut line = model::static_report(device, "static llama, unfused attention, captured step replayed", dtype, &unfused, &eager.tokens);
                    line["pass"] = pass.into();
                    println!("{line}");
                    // a 16-bit model's cache in its own dtype, as candle-transformers' llama
                    // keeps it: q, k and v stay in that dtype
                    if dtype != DType::F32 {
                        let native = model::run_static(&config, &weights, (dtype, Some(dtype)), &dev, true, true)?;
                        let variant = format!("static llama, {} KV cache, captured step replayed", dtype.as_str());
                        let mut line = model::static_report(device, &variant, dtype, &native, &eager.tokens);
                        line["pass"] = pass.into();
                        println!("{line}");
                    }
                }
            }
        }
        Some("gguf-write") => {
            let need = |flag: &str| flag_value(args, flag).ok_or(format!("gguf-write needs {flag}"));
            let mut shape = gguf::shape(need("--shape")?)?;
            if let Some(layers) = flag_value(args, "--layers") {
                shape.layers = layers.parse()?;
            }
            if let Some(context) = flag_value(args, "--context") {
                shape.context = context.parse()?;
            }
            gguf::write(
                shape,
                gguf::block_type(need("--type")?)?,
                std::path::Path::new(need("--tokenizer-from")?),
                std::path::Path::new(need("--out")?),
            )?;
        }
        Some("gguf") => {
            let device = flag_value(args, "--device").unwrap_or("rocm");
            let file = flag_value(args, "--file").ok_or("gguf needs --file")?;
            let prompt = flag_value(args, "--prompt").map_or(Ok(512), str::parse)?;
            let decode = flag_value(args, "--decode").map_or(Ok(128), str::parse)?;
            let path = std::path::Path::new(file);
            if args.iter().any(|a| a == "--profile") {
                // a short run for a kernel profiler: the prompt, then `decode` steps
                let quantized_llama = args.iter().any(|a| a == "--quantized-llama");
                return gguf::profile(path, &open(device)?, (prompt, decode), quantized_llama);
            }
            let mut result = if args.iter().any(|a| a == "--static") {
                let cache = match flag_value(args, "--cache").unwrap_or("f32") {
                    "f32" => candle_core::DType::F32,
                    "f16" => candle_core::DType::F16,
                    "bf16" => candle_core::DType::BF16,
                    other => return Err(format!("--cache {other}: f32, f16 or bf16").into()),
                };
                match flag_value(args, "--batches") {
                    Some(list) => {
                        let batches = list
                            .split(',')
                            .map(str::parse)
                            .collect::<Result<Vec<usize>, _>>()?;
                        gguf::run_static_batches(path, &open(device)?, (prompt, decode), cache, &batches)?
                    }
                    None => gguf::run_static(path, &open(device)?, (prompt, decode), cache)?,
                }
            } else {
                // activations of the mixture-of-experts model (quantized_llama's are f32)
                let dtype = match flag_value(args, "--dtype") {
                    Some(_) => dtype_flag(args)?,
                    None => DType::F32,
                };
                gguf::run(path, &open(device)?, (prompt, decode), dtype)?
            };
            result["device"] = device.into();
            println!("{result}");
        }
        _ => {
            return Err(
                "usage: candle-rocm-bench gguf-write ... | gguf ... | ops [--quick] [--devices rocm,cuda] [--only OP] | model --device rocm|cuda|none \
                        [--dtype bf16|f32] [--repeats N] [--logits FILE] [--save-weights FILE] [--save-config FILE]"
                    .into(),
            )
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("candle-rocm-bench: {e}");
        std::process::exit(1);
    }
}
