//! `candle-rocm-tp`: a tensor-parallel llama (`candle_rocm_e2e::static_llama` sharded over
//! ranks, one process a GPU, collectives through rocm-ccl) and its launcher.
//!
//! ```text
//! candle-rocm-tp check [--ranks N]     f32, seeded small llama: greedy tokens of N ranks equal
//!                                      1 rank's and candle-transformers' llama's
//! candle-rocm-tp bench [--ranks N] [--shape 8b|1b] [--dtype bf16|f32]
//!                                      prefill and decode throughput on 1 and N ranks
//! candle-rocm-tp rank --rank R --ranks N --rendezvous tcp:HOST:PORT|file:PATH
//!                     [--device D] --mode check|bench [--shape ..] [--dtype ..]
//!                                      one rank (what the launcher starts; across machines,
//!                                      start one per GPU with a tcp rendezvous)
//! ```
//! Rank 0 prints its result as one JSON line on stdout; progress goes to stderr.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use candle_core::rocm_backend::collective::Comm;
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_rocm_e2e::llama::{self, fnv1a, prompt, uniform_values, DrawnWeights, Generator};
use candle_rocm_e2e::static_llama::{self, Decoder, StaticLlama};
use candle_rocm_e2e::DemoResult;
use candle_transformers::models::llama::Config;
use serde_json::json;

const CHECK_SEED: u64 = 11;
const CHECK_STEPS: usize = 32;
const BENCH_SEED: u64 = 2026;
const PREFILL: usize = 512;
const DECODE: usize = 128;

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn bench_config(shape: &str) -> DemoResult<Config> {
    Ok(match shape {
        // Llama 3 8B's shape with Llama 2's vocabulary
        "8b" => Config {
            max_position_embeddings: 4096,
            ..llama::config(4096, 14336, 32000, 32, 32, 8)
        },
        "1b" => Config {
            max_position_embeddings: 4096,
            ..llama::config(2048, 8192, 32000, 16, 32, 8)
        },
        other => return Err(format!("--shape {other}: 8b or 1b").into()),
    })
}

fn dtype_of(args: &[String]) -> DemoResult<DType> {
    match flag(args, "--dtype").unwrap_or("bf16") {
        "bf16" => Ok(DType::BF16),
        "f32" => Ok(DType::F32),
        other => Err(format!("--dtype {other}: bf16 or f32").into()),
    }
}

/// One rank: joins the group, loads its part of the model, runs the mode.
fn rank_main(args: &[String]) -> DemoResult<()> {
    let need = |name: &str| flag(args, name).ok_or(format!("rank needs {name}"));
    let rank: usize = need("--rank")?.parse()?;
    let ranks: usize = need("--ranks")?.parse()?;
    let device_ordinal: usize = flag(args, "--device").map_or(Ok(rank), str::parse)?;
    let mode = need("--mode")?;
    let dev = Device::new_rocm(device_ordinal)?;
    let comm = if ranks > 1 {
        let started = Instant::now();
        let c = Comm::join(&dev, need("--rendezvous")?, rank, ranks)?;
        eprintln!(
            "rank {rank}: joined {ranks} ranks in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Some(Arc::new(c))
    } else {
        None
    };
    let result = match mode {
        "check" => {
            let config = llama::small_config();
            let weights = DrawnWeights::new(|name, n| {
                llama::normal_values(CHECK_SEED ^ fnv1a(name), n, 0.15)
            });
            let vb = VarBuilder::from_backend(Box::new(&weights), DType::F32, Device::Cpu);
            let model = StaticLlama::load_sharded(vb, &config, 256, &dev, comm.clone())?;
            let input = prompt(9, config.vocab_size);
            let (eager, logits) = static_llama::greedy(&model, &input, CHECK_STEPS, false)?;
            let (captured, _) = static_llama::greedy(&model, &input, CHECK_STEPS, true)?;
            let mut out = json!({
                "mode": "check", "ranks": ranks, "tokens": eager, "captured_tokens": captured,
                "first_logits": logits,
            });
            if ranks == 1 {
                // candle-transformers' llama on the same weights, one GPU
                let mut reference = Generator::new(&config, CHECK_SEED, DType::F32, &dev)?;
                out["llama_tokens"] = json!(reference.greedy(&input, CHECK_STEPS, |_| {})?.tokens);
            }
            out
        }
        "bench" => {
            let config = bench_config(flag(args, "--shape").unwrap_or("8b"))?;
            let dtype = dtype_of(args)?;
            let started = Instant::now();
            let weights =
                DrawnWeights::new(|name, n| uniform_values(BENCH_SEED ^ fnv1a(name), n, 0.05));
            let vb = VarBuilder::from_backend(Box::new(&weights), dtype, Device::Cpu);
            let model =
                StaticLlama::load_sharded(vb, &config, PREFILL + DECODE + 8, &dev, comm.clone())?;
            dev.synchronize()?;
            eprintln!(
                "rank {rank}: loaded in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            let input = prompt(PREFILL, config.vocab_size);
            let mut runs = Vec::new();
            for captured in [false, true] {
                // a warm-up sequence, then the timed one
                let mut warm = Decoder::new(&model, input[0], captured)?;
                warm.prefill(&input)?;
                for _ in 0..3 {
                    warm.next_token()?;
                }
                drop(warm);
                let mut decoder = Decoder::new(&model, input[0], captured)?;
                dev.synchronize()?;
                let start = Instant::now();
                let mut tokens = vec![decoder.prefill(&input)?];
                let prefill_s = start.elapsed().as_secs_f64();
                let start = Instant::now();
                while tokens.len() < DECODE {
                    tokens.push(decoder.next_token()?);
                }
                let decode_s = start.elapsed().as_secs_f64();
                runs.push(json!({
                    "captured": captured,
                    "prefill_tokens_per_s": PREFILL as f64 / prefill_s,
                    "decode_tokens_per_s": (DECODE - 1) as f64 / decode_s,
                    "tokens": tokens,
                }));
            }
            json!({
                "mode": "bench", "ranks": ranks, "dtype": dtype.as_str(),
                "model": format!("llama, hidden {}, {} layers, {} heads ({} kv), ffn {}, vocab {}",
                    config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
                    config.num_key_value_heads, config.intermediate_size, config.vocab_size),
                "prefill_tokens": PREFILL, "decode_tokens": DECODE, "runs": runs,
                "pool_peak_bytes": candle_rocm_e2e::peak_memory(&dev),
            })
        }
        other => return Err(format!("--mode {other}: check or bench").into()),
    };
    if let Some(c) = &comm {
        c.wait()?;
    }
    if rank == 0 {
        println!("{result}");
    }
    Ok(())
}

/// Starts `ranks` local ranks of this program and returns rank 0's JSON line.
fn launch(ranks: usize, rank_args: &[&str]) -> DemoResult<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("candle-rocm-tp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let rendezvous = dir.join(format!("id-{ranks}"));
    let _ = std::fs::remove_file(&rendezvous);
    let mut children = Vec::new();
    for rank in 0..ranks {
        let child = Command::new(&exe)
            .args([
                "rank",
                "--rank",
                &rank.to_string(),
                "--ranks",
                &ranks.to_string(),
            ])
            .args(["--rendezvous", &format!("file:{}", rendezvous.display())])
            .args(rank_args)
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()?;
        children.push(child);
    }
    let mut line = None;
    let mut failed = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            failed.push(format!("rank {rank}: {}", out.status));
        }
        if rank == 0 {
            line = String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .map(str::to_string);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !failed.is_empty() {
        return Err(format!("{ranks} ranks: {}", failed.join(", ")).into());
    }
    Ok(serde_json::from_str(
        &line.ok_or("rank 0 printed nothing")?,
    )?)
}

fn run(args: &[String]) -> DemoResult<bool> {
    // the launcher's default: every device of the platform
    let ranks = || -> DemoResult<usize> {
        match flag(args, "--ranks") {
            Some(r) => Ok(r.parse()?),
            None => Ok(candle_core::rocm_backend::RocmDevice::count()?),
        }
    };
    match args.first().map(String::as_str) {
        Some("rank") => rank_main(&args[1..]).map(|()| true),
        Some("check") => {
            let ranks = ranks()?;
            let one = launch(1, &["--mode", "check"])?;
            let many = launch(ranks, &["--mode", "check"])?;
            let (t1, tn) = (&one["tokens"], &many["tokens"]);
            let checks = [
                ("1 rank: captured tokens equal the eager ones", one["captured_tokens"] == *t1),
                ("1 rank: tokens equal candle-transformers' llama's", one["llama_tokens"] == *t1),
                ("N ranks: captured tokens equal the eager ones", many["captured_tokens"] == *tn),
                ("N ranks: tokens equal 1 rank's", tn == t1),
            ];
            let max_diff = one["first_logits"]
                .as_array()
                .zip(many["first_logits"].as_array())
                .map(|(a, b)| {
                    a.iter().zip(b).fold(0f64, |m, (x, y)| {
                        m.max((x.as_f64().unwrap_or(f64::NAN) - y.as_f64().unwrap_or(f64::NAN)).abs())
                    })
                })
                .unwrap_or(f64::NAN);
            let mut ok = true;
            for (what, passed) in checks {
                println!("[{}] {what}", if passed { "PASSED" } else { "FAILED" });
                ok &= passed;
            }
            println!(
                "{}",
                json!({"check": "tensor-parallel llama", "ranks": ranks, "passed": ok,
                       "tokens": t1, "first_logits_max_abs_diff_1_vs_n": max_diff})
            );
            Ok(ok)
        }
        Some("bench") => {
            let ranks = ranks()?;
            let mut rank_args = vec!["--mode", "bench"];
            for f in ["--shape", "--dtype"] {
                if let Some(v) = flag(args, f) {
                    rank_args.extend([f, v]);
                }
            }
            for n in [1, ranks] {
                let result = launch(n, &rank_args)?;
                println!("{result}");
                if n == ranks {
                    break;
                }
            }
            Ok(true)
        }
        _ => Err("usage: candle-rocm-tp check [--ranks N] | bench [--ranks N] [--shape 8b|1b] [--dtype bf16|f32] | rank ...".into()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("candle-rocm-tp: {e}");
            std::process::exit(1);
        }
    }
}
