//! Bandwidth of rocm-indexing, timed with device events; one JSON object per line, the first
//! the device-to-device copy ceiling. `bash .gpu/run.sh --bench` adds torch on the same shapes
//! (bench/torch_indexing.py). Bytes: what the op must move (output written, rows read, ids
//! read; a scatter also reads and writes its destination rows once).

use rand::{Rng, SeedableRng};
use rocm_bench_support::{report_bandwidth, time_ms};
use rocm_indexing::{
    self as ri, Buffer, DType, Device, IndexOptions, Layout, Operand, Result, ScatterStrategy,
};

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

/// One f32 accumulation: `src` (rows, cols) added into `dst` along `dim`, by index_add (1-D ids,
/// one per src row) or scatter_add (one id per src element); ids uniform in [0, dst dim).
struct Accumulation {
    label: &'static str,
    dst: [usize; 2],
    src: [usize; 2],
    dim: usize,
    index_add: bool,
    seed: u64,
    /// Bytes each update moves: its value, its id (scatter) and the destination element read
    /// and written, unless the destination stays in cache (heavy collisions).
    bytes_per_update: usize,
}

const ACCUMULATIONS: [Accumulation; 4] = [
    // embedding backward: 8192 rows of 4096 added into a (32000, 4096) table (4096 columns)
    Accumulation {
        label: "index_add 8192 rows x 4096",
        dst: [32_000, 4096],
        src: [8192, 4096],
        dim: 0,
        index_add: true,
        seed: 1,
        bytes_per_update: 12,
    },
    // the same with 2^16 columns
    Accumulation {
        label: "index_add 512 rows x 65536",
        dst: [1024, 1 << 16],
        src: [512, 1 << 16],
        dim: 0,
        index_add: true,
        seed: 6,
        bytes_per_update: 12,
    },
    // heavy collisions: 16 columns
    Accumulation {
        label: "scatter_add (16, 2^18) into (16, 1024)",
        dst: [16, 1024],
        src: [16, 1 << 18],
        dim: 1,
        index_add: false,
        seed: 3,
        bytes_per_update: 8,
    },
    // many columns (2^20), 8 updates each
    Accumulation {
        label: "scatter_add (8, 2^20) into (64, 2^20)",
        dst: [64, 1 << 20],
        src: [8, 1 << 20],
        dim: 0,
        index_add: false,
        seed: 4,
        bytes_per_update: 16,
    },
];

fn accumulate(d: &Device, c: &Accumulation, o: &IndexOptions) -> Result<()> {
    let tag = match o.strategy {
        ScatterStrategy::Ownership => "ownership",
        _ => "per update",
    };
    let dst = filled(d, c.dst[0] * c.dst[1] * 4)?;
    let dl = Layout::contiguous(&c.dst);
    let src = filled(d, c.src[0] * c.src[1] * 4)?;
    let sl = Layout::contiguous(&c.src);
    let n_ids = if c.index_add {
        c.src[0]
    } else {
        c.src[0] * c.src[1]
    };
    let id_buf = ids(d, n_ids, c.dst[c.dim] as u32, c.seed)?;
    let il = Layout::contiguous(&[n_ids]);
    let idv = Operand::new(&id_buf, DType::U32, if c.index_add { &il } else { &sl });
    let (dv, sv) = (
        Operand::new(&dst, DType::F32, &dl),
        Operand::new(&src, DType::F32, &sl),
    );
    let f = if c.index_add {
        ri::index_add_set
    } else {
        ri::scatter_add_set
    };
    let ms = time_ms(d, ITERS, || f(d, (dv, idv, sv), c.dim, o))?;
    // index_add reads each of its row ids once
    let bytes = c.src[0] * c.src[1] * c.bytes_per_update + if c.index_add { n_ids * 4 } else { 0 };
    report_bandwidth(&format!("{} ({tag})", c.label), "f32", bytes, ms);
    Ok(())
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
        let src = Operand::new(&table, dtype, &tl);
        let idv = Operand::new(&id_buf, DType::U32, &id_l);
        let ms = time_ms(&d, ITERS, || {
            ri::index_select(&d, src, idv, 0, &opts).map(drop)
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
        let src = Operand::new(&x, dtype, &gl);
        let idv = Operand::new(&gids, DType::U32, &gl);
        let ms = time_ms(&d, ITERS, || ri::gather(&d, src, idv, 1, &opts).map(drop))?;
        report_bandwidth(
            "gather (8192, 4096) along dim 1",
            dtype.as_str(),
            n_ids * width * (2 * w + 4),
            ms,
        );
    }
    // Accumulations, each shape with both strategies (the measurement behind the Auto choice).
    for strategy in [ScatterStrategy::Ownership, ScatterStrategy::PerUpdate] {
        let o = IndexOptions { strategy, ..opts };
        for case in ACCUMULATIONS {
            accumulate(&d, &case, &o)?;
        }
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
            ri::arg_sort_last_dim(&d, Operand::new(&x, DType::F32, &l), false).map(drop)
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
