//! A decode step's attention over a key/value cache (`cached_attention`, each sequence's query
//! at the end of its cache, positions read on the device as a captured step has them): GB/s of
//! the cache bytes a call reads (each key and value row once) against the device-to-device copy
//! ceiling of the same run (its first line), for each path: one block a query row, a query row
//! a block of each run of the cache (`split`), a kv head's query heads a block (`grouped`), the
//! same on the matrix units (`matrix`, 16-bit caches), and the path `cached_attention` takes
//! (`auto`). Shapes: the 8B llama's heads (32 query, 8
//! kv, head dim 128: groups of 4) and a group of 8 (32 over 4, Qwen3-30B-A3B's), batches of
//! 1, 4, 16 and 64 sequences at 1K, 4K and 16K positions, an f32 cache and an f16 cache under
//! f32 queries (the static llama's two), and bf16 over bf16. Caches rotate over copies that
//! together pass 200 MB, so every call reads them from memory. One JSON object per line.
//! `--quick`: batch 16 at 4K only.

use rocm_attention::{cached_attention_via, AttentionMask, AttentionPath};
use rocm_bench_support::{report_bandwidth, time_ms};
use rocm_device::{DType, Device, Layout, Operand, Result};

const ITERS: usize = 20;
const ROTATE_BYTES: usize = 200 << 20;

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let quick = std::env::args().any(|a| a == "--quick");
    let bytes = 256 << 20;
    let (a, b) = (d.alloc(bytes)?, d.alloc(bytes)?);
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, bytes))?;
    report_bandwidth("copy (ceiling)", "-", 2 * bytes, ms);
    drop((a, b));
    let head_dim = 128usize;
    for (q_dtype, cache) in [
        (DType::F32, DType::F32),
        (DType::F32, DType::F16),
        (DType::BF16, DType::BF16),
    ] {
        for (heads, kv_heads) in [(32usize, 8usize), (32, 4)] {
            for batch in [1usize, 4, 16, 64] {
                for context in [1024usize, 4096, 16384] {
                    if quick && (batch != 16 || context != 4096) {
                        continue;
                    }
                    let cache_bytes = batch * kv_heads * context * head_dim * cache.size_in_bytes();
                    let copies = ROTATE_BYTES.div_ceil(2 * cache_bytes).max(1);
                    let mut kv = Vec::with_capacity(copies);
                    for i in 0..copies {
                        let (k, v) = (d.alloc(cache_bytes)?, d.alloc(cache_bytes)?);
                        // small finite values of every dtype (0x3c3c.. f16 1.06, 0x2e.. small)
                        d.memset(&k, 0, cache_bytes, 0x2e + (i % 3) as u8)?;
                        d.memset(&v, 0, cache_bytes, 0x3c)?;
                        kv.push((k, v));
                    }
                    let q_bytes = batch * heads * head_dim * q_dtype.size_in_bytes();
                    let q = d.alloc(q_bytes)?;
                    d.memset(&q, 0, q_bytes, 0x3c)?;
                    let positions: Vec<u8> = (0..batch)
                        .flat_map(|_| ((context - 1) as u32).to_ne_bytes())
                        .collect();
                    let pos = d.alloc(positions.len())?;
                    d.copy_htod(&positions, &pos, 0)?;
                    let (q_layout, cache_layout, pos_layout) = (
                        Layout::contiguous(&[batch, heads, 1, head_dim]),
                        Layout::contiguous(&[batch, kv_heads, context, head_dim]),
                        Layout::contiguous(&[batch, 1]),
                    );
                    for (name, path) in [
                        ("one_block", AttentionPath::OneBlockARow),
                        ("split", AttentionPath::Split),
                        ("grouped", AttentionPath::GroupedSplit),
                        ("matrix", AttentionPath::MatrixSplit),
                        ("auto", AttentionPath::Auto),
                    ] {
                        // an f32 cache has no matrix form (the grouped split stands in)
                        if path == AttentionPath::MatrixSplit && cache == DType::F32 {
                            continue;
                        }
                        let mut turn = 0usize;
                        let ms = time_ms(&d, ITERS, || {
                            let (k, v) = &kv[turn % copies];
                            turn += 1;
                            cached_attention_via(
                                &d,
                                (
                                    Operand::new(&q, q_dtype, &q_layout),
                                    Operand::new(k, cache, &cache_layout),
                                    Operand::new(v, cache, &cache_layout),
                                ),
                                AttentionMask::Positions(Operand::new(
                                    &pos,
                                    DType::U32,
                                    &pos_layout,
                                )),
                                1.0 / (head_dim as f32).sqrt(),
                                path,
                            )
                            .map(drop)
                        })?;
                        let gbps = 2.0 * cache_bytes as f64 / (ms * 1e-3) / 1e9;
                        println!(
                            "{{\"op\": \"decode attention\", \"path\": \"{name}\", \
                             \"queries\": \"{q_dtype}\", \"cache\": \"{cache}\", \"heads\": {heads}, \
                             \"kv_heads\": {kv_heads}, \"head_dim\": {head_dim}, \"batch\": {batch}, \
                             \"context\": {context}, \"bytes\": {}, \"ms\": {ms:.4}, \"gbps\": {gbps:.1}}}",
                            2 * cache_bytes
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
