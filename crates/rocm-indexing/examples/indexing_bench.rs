//! Bandwidth of rocm-indexing, timed with device events; one JSON object per line, the first
//! the device-to-device copy ceiling. `bash .gpu/run.sh --bench` adds torch on the same shapes
//! (bench/torch_indexing.py). Bytes: what the op must move (output written, rows read, ids
//! read; a scatter also reads and writes its destination rows once).

use rand::{Rng, SeedableRng};
use rocm_indexing::{
    self as ri, Buffer, DType, Device, Ids, IndexOptions, Layout, Result, ScatterStrategy, View,
};
use rocm_test_support::{report_bandwidth, time_ms};

const ITERS: usize = 20;

fn filled(d: &Device, bytes: usize) -> Result<Buffer> {
    let b = d.alloc(bytes)?;
    d.memset(&b, 0, bytes, 0x3c)?;
    Ok(b)
}

/// `n` u32 ids uniform in [0, range) (the same seed as the torch peer's sizes, not values).
fn ids(d: &Device, n: usize, range: u32, seed: u64) -> Result<Buffer> {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let v: Vec<u8> = (0..n)
        .flat_map(|_| r.random_range(0..range).to_le_bytes())
        .collect();
    let b = d.alloc(v.len())?;
    d.copy_htod(&v, &b, 0)?;
    Ok(b)
}

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let copy = 256 << 20;
    let (a, b) = (d.alloc(copy)?, d.alloc(copy)?);
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, copy))?;
    report_bandwidth("copy (ceiling)", "-", 2 * copy, ms);
    drop((a, b));
    let opts = IndexOptions::default();
    let (rows, width, n_ids) = (32_000usize, 4096usize, 8192usize);
    let id_buf = ids(&d, n_ids, rows as u32, 1)?;
    let id_l = Layout::contiguous(&[n_ids]);
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        let w = dtype.size_in_bytes();
        let table = filled(&d, rows * width * w)?;
        let tl = Layout::contiguous(&[rows, width]);
        let src = View {
            buffer: &table,
            layout: &tl,
        };
        let idv = Ids {
            dtype: DType::U32,
            buffer: &id_buf,
            layout: &id_l,
        };
        let ms = time_ms(&d, ITERS, || {
            ri::index_select(&d, dtype, src, idv, 0, &opts).map(drop)
        })?;
        report_bandwidth(
            "index_select 8192 of 32000 rows x 4096",
            dtype.as_str(),
            2 * n_ids * width * w + n_ids * 4,
            ms,
        );
    }
    // gather along the last dim of (8192, 4096): one id per element
    let gids = ids(&d, n_ids * width, width as u32, 2)?;
    let gl = Layout::contiguous(&[n_ids, width]);
    for dtype in [DType::BF16, DType::F32] {
        let w = dtype.size_in_bytes();
        let x = filled(&d, n_ids * width * w)?;
        let src = View {
            buffer: &x,
            layout: &gl,
        };
        let idv = Ids {
            dtype: DType::U32,
            buffer: &gids,
            layout: &gl,
        };
        let ms = time_ms(&d, ITERS, || {
            ri::gather(&d, dtype, src, idv, 1, &opts).map(drop)
        })?;
        report_bandwidth(
            "gather (8192, 4096) along dim 1",
            dtype.as_str(),
            n_ids * width * (2 * w + 4),
            ms,
        );
    }
    // Accumulations, each shape with both strategies (the measurement behind the Auto choice).
    let dtype = DType::F32;
    for strategy in [ScatterStrategy::Ownership, ScatterStrategy::PerUpdate] {
        let tag = match strategy {
            ScatterStrategy::Ownership => "ownership",
            _ => "per update",
        };
        let o = IndexOptions { strategy, ..opts };
        // embedding backward: 8192 rows of 4096 added into a (32000, 4096) table (4096 columns)
        let dst = filled(&d, rows * width * 4)?;
        let dl = Layout::contiguous(&[rows, width]);
        let src = filled(&d, n_ids * width * 4)?;
        let sl = Layout::contiguous(&[n_ids, width]);
        let idv = Ids {
            dtype: DType::U32,
            buffer: &id_buf,
            layout: &id_l,
        };
        let ms = time_ms(&d, ITERS, || {
            ri::index_add_set(
                &d,
                dtype,
                View {
                    buffer: &dst,
                    layout: &dl,
                },
                idv,
                View {
                    buffer: &src,
                    layout: &sl,
                },
                0,
                &o,
            )
        })?;
        report_bandwidth(
            &format!("index_add 8192 rows x 4096 ({tag})"),
            "f32",
            3 * n_ids * width * 4 + n_ids * 4,
            ms,
        );
        drop(dst);
        // the same with 2^16 columns: 512 rows of 65536 added into (1024, 65536)
        let (r, m, c) = (512usize, 1024usize, 1usize << 16);
        let dst = filled(&d, m * c * 4)?;
        let dl = Layout::contiguous(&[m, c]);
        let src = filled(&d, r * c * 4)?;
        let sl = Layout::contiguous(&[r, c]);
        let rids = ids(&d, r, m as u32, 6)?;
        let rl = Layout::contiguous(&[r]);
        let idv = Ids {
            dtype: DType::U32,
            buffer: &rids,
            layout: &rl,
        };
        let ms = time_ms(&d, ITERS, || {
            ri::index_add_set(
                &d,
                dtype,
                View {
                    buffer: &dst,
                    layout: &dl,
                },
                idv,
                View {
                    buffer: &src,
                    layout: &sl,
                },
                0,
                &o,
            )
        })?;
        report_bandwidth(
            &format!("index_add 512 rows x 65536 ({tag})"),
            "f32",
            3 * r * c * 4 + r * 4,
            ms,
        );
        drop(dst);
        // heavy collisions: (16, 2^18) updates into (16, 1024) along dim 1 (16 columns)
        let (r, n, m) = (16usize, 1usize << 18, 1024usize);
        let dst = filled(&d, r * m * 4)?;
        let dl = Layout::contiguous(&[r, m]);
        let src = filled(&d, r * n * 4)?;
        let sl = Layout::contiguous(&[r, n]);
        let cids = ids(&d, r * n, m as u32, 3)?;
        let idv = Ids {
            dtype: DType::U32,
            buffer: &cids,
            layout: &sl,
        };
        let ms = time_ms(&d, ITERS, || {
            ri::scatter_add_set(
                &d,
                dtype,
                View {
                    buffer: &dst,
                    layout: &dl,
                },
                idv,
                View {
                    buffer: &src,
                    layout: &sl,
                },
                1,
                &o,
            )
        })?;
        report_bandwidth(
            &format!("scatter_add (16, 2^18) into (16, 1024) ({tag})"),
            "f32",
            r * n * 8,
            ms,
        );
        // many columns: (8, 2^20) updates into (64, 2^20) along dim 0 (2^20 columns)
        let (r, n, m) = (8usize, 1usize << 20, 64usize);
        let dst = filled(&d, m * n * 4)?;
        let dl = Layout::contiguous(&[m, n]);
        let src = filled(&d, r * n * 4)?;
        let sl = Layout::contiguous(&[r, n]);
        let cids = ids(&d, r * n, m as u32, 4)?;
        let idv = Ids {
            dtype: DType::U32,
            buffer: &cids,
            layout: &sl,
        };
        let ms = time_ms(&d, ITERS, || {
            ri::scatter_add_set(
                &d,
                dtype,
                View {
                    buffer: &dst,
                    layout: &dl,
                },
                idv,
                View {
                    buffer: &src,
                    layout: &sl,
                },
                0,
                &o,
            )
        })?;
        report_bandwidth(
            &format!("scatter_add (8, 2^20) into (64, 2^20) ({tag})"),
            "f32",
            r * n * 16,
            ms,
        );
    }
    // arg_sort: 64 rows of a 32000-entry vocabulary, and 2^16 rows of 64 (MoE routing)
    for (r, len) in [(64usize, 32_000usize), (1 << 16, 64)] {
        let x = d.alloc(r * len * 4)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let v: Vec<u8> = (0..r * len)
            .flat_map(|_| rng.random::<f32>().to_le_bytes())
            .collect();
        d.copy_htod(&v, &x, 0)?;
        let l = Layout::contiguous(&[r, len]);
        let ms = time_ms(&d, ITERS, || {
            ri::arg_sort_last_dim(
                &d,
                DType::F32,
                View {
                    buffer: &x,
                    layout: &l,
                },
                false,
            )
            .map(drop)
        })?;
        report_bandwidth(
            &format!("arg_sort {r} rows of {len}"),
            "f32",
            r * len * 8,
            ms,
        );
    }
    Ok(())
}
