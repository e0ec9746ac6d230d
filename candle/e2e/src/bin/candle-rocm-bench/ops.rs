//! The op benchmark: every op family through Candle's Tensor API, on each device, at a
//! memory-bound size (inputs of 256 MiB and more, far beyond L2) and a launch-bound size
//! (4 K elements), in f32 and bf16. One JSON line per (case, device); the torch peer
//! (`bench/torch_candle_ops.py`) reads the same lines and times the same op and shapes.

use candle_core::{DType, Device, Result, Tensor, D};
use serde_json::json;

use crate::timing::{median_host_seconds_per_call, median_seconds_per_call};

/// The input of a memory-bound case: 256 MiB whatever the dtype.
const LARGE_BYTES: usize = 256 << 20;
const COLS: usize = 4096;

/// How many bytes an op moves or how many flops it does; rates are computed from it.
#[derive(Clone, Copy)]
enum Work {
    Bytes(usize),
    Flops(usize),
}

/// One benchmark case: an op at one dtype and size, built for a given device.
struct Case {
    family: &'static str,
    op: &'static str,
    dtype: DType,
    large: bool,
    /// The shapes torch rebuilds the case from (the op's inputs, in order).
    shapes: Vec<Vec<usize>>,
    /// Extra scalars the op needs (kernel size, stride, padding...).
    params: Vec<usize>,
    work: Work,
}

fn elems(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The cases of one dtype and size, in table order.
fn cases(dtype: DType, large: bool) -> Vec<Case> {
    let size = dtype.size_in_bytes();
    let rows = if large { LARGE_BYTES / size / COLS } else { 4 };
    let cols = if large { COLS } else { 1024 };
    let m = vec![rows, cols];
    let bytes = elems(&m) * size;
    let mut out = Vec::new();
    let mut add = |family, op, shapes: Vec<Vec<usize>>, params: Vec<usize>, work| {
        out.push(Case {
            family,
            op,
            dtype,
            large,
            shapes,
            params,
            work,
        })
    };
    // ops of the (rows, cols) matrix alone: (family, op, bytes moved), in table order
    let other = if dtype == DType::F32 { 2 } else { 4 };
    let matrix_ops = [
        ("copy", "copy", 2 * bytes),
        ("copy", "transpose copy", 2 * bytes),
        ("elementwise", "exp", 2 * bytes),
        ("elementwise", "gelu", 2 * bytes),
        ("elementwise", "affine", 2 * bytes),
    ];
    for (family, op, moved) in matrix_ops {
        add(family, op, vec![m.clone()], vec![], Work::Bytes(moved));
    }
    add(
        "elementwise",
        "add",
        vec![m.clone(), m.clone()],
        vec![],
        Work::Bytes(3 * bytes),
    );
    add(
        "elementwise",
        "add broadcast row",
        vec![m.clone(), vec![1, cols]],
        vec![],
        Work::Bytes(2 * bytes),
    );
    add(
        "cast",
        "cast to the other float",
        vec![m.clone()],
        vec![],
        Work::Bytes(bytes + elems(&m) * other),
    );
    add(
        "ternary",
        "where_cond",
        vec![m.clone(), m.clone(), m.clone()],
        vec![],
        Work::Bytes(3 * bytes + elems(&m)),
    );
    let reduce_and_norm_ops = [
        ("reduce", "sum last dim", bytes),
        ("reduce", "sum all", bytes),
        ("reduce", "max last dim", bytes),
        ("reduce", "argmax last dim", bytes),
        ("norm", "softmax last dim", 2 * bytes),
        ("norm", "rms_norm", 2 * bytes),
        ("norm", "layer_norm", 2 * bytes),
    ];
    for (family, op, moved) in reduce_and_norm_ops {
        add(family, op, vec![m.clone()], vec![], Work::Bytes(moved));
    }
    // rope on (batch, heads, seq, head_dim) with head_dim 128
    let rope = if large {
        vec![1, 32, elems(&m) / (32 * 128), 128]
    } else {
        vec![1, 4, 8, 128]
    };
    for op in ["rope", "rope_i"] {
        add(
            "rope",
            op,
            vec![rope.clone()],
            vec![],
            Work::Bytes(2 * bytes),
        );
    }
    // an embedding lookup: `rows` ids into a table of 32000 rows
    let table = vec![if large { 32000 } else { 64 }, cols];
    add(
        "indexing",
        "index_select rows",
        vec![table, vec![rows]],
        vec![],
        Work::Bytes(2 * bytes + 4 * rows),
    );
    add(
        "indexing",
        "gather last dim",
        vec![m.clone(), m.clone()],
        vec![],
        Work::Bytes(2 * bytes + 4 * elems(&m)),
    );
    add(
        "indexing",
        "index_add rows",
        vec![m.clone(), vec![rows], m.clone()],
        vec![],
        Work::Bytes(3 * bytes + 4 * rows),
    );
    add(
        "indexing",
        "scatter_add last dim",
        vec![m.clone(), m.clone(), m.clone()],
        vec![],
        Work::Bytes(3 * bytes + 4 * elems(&m)),
    );
    let mm = if large { 4096 } else { 64 };
    add(
        "matmul",
        "matmul",
        vec![vec![mm, mm], vec![mm, mm]],
        vec![],
        Work::Flops(2 * mm * mm * mm),
    );
    // attention scores: (batch*heads, seq, 128) x (batch*heads, 128, seq)
    let (bh, seq) = if large { (64, 1024) } else { (2, 32) };
    add(
        "matmul",
        "batched matmul q k^t",
        vec![vec![bh, seq, 128], vec![bh, 128, seq]],
        vec![],
        Work::Flops(2 * bh * seq * seq * 128),
    );
    // a ResNet block's 3x3 convolution, and a stride-2 transposed one (decoder upsampling)
    let (n, c, hw) = if large { (32, 128, 56) } else { (1, 8, 8) };
    add(
        "conv",
        "conv2d 3x3",
        vec![vec![n, c, hw, hw], vec![c, c, 3, 3]],
        vec![1, 1],
        Work::Flops(2 * n * c * hw * hw * c * 9),
    );
    add(
        "conv",
        "conv_transpose2d 4x4 stride 2",
        vec![vec![n, c, hw / 2, hw / 2], vec![c, c / 2, 4, 4]],
        vec![1, 2],
        Work::Flops(2 * n * c * (hw / 2) * (hw / 2) * (c / 2) * 16),
    );
    let pool = if large {
        vec![LARGE_BYTES / size / (64 * 128 * 128), 64, 128, 128]
    } else {
        vec![1, 4, 32, 32]
    };
    let pool_bytes = elems(&pool) * size;
    for op in ["max_pool2d 2x2", "avg_pool2d 2x2"] {
        add(
            "pool",
            op,
            vec![pool.clone()],
            vec![2],
            Work::Bytes(pool_bytes + pool_bytes / 4),
        );
    }
    out
}

/// Uniform values in [-1, 1) of `dtype` (drawn on the device: inputs of 256 MiB).
fn uniform(shape: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
    Tensor::rand(-1f32, 1f32, shape, dev)?.to_dtype(dtype)
}

/// Ids in [0, n) as u32, drawn on the device.
fn ids(shape: &[usize], n: usize, dev: &Device) -> Result<Tensor> {
    (Tensor::rand(0f32, n as f32, shape, dev)?
        .floor()?
        .clamp(0f32, (n - 1) as f32))?
    .to_dtype(DType::U32)
}

type Run = Box<dyn FnMut() -> Result<Tensor>>;

/// The case's inputs on `dev` and the call that is timed.
fn build(case: &Case, dev: &Device) -> Result<Run> {
    let dt = case.dtype;
    let s = &case.shapes;
    let x = || uniform(&s[0], dt, dev);
    let run: Run = match case.op {
        "copy" => {
            let x = x()?;
            Box::new(move || x.copy())
        }
        "transpose copy" => {
            let x = x()?;
            Box::new(move || x.t()?.contiguous())
        }
        "exp" => {
            let x = x()?;
            Box::new(move || x.exp())
        }
        "gelu" => {
            let x = x()?;
            Box::new(move || x.gelu())
        }
        "affine" => {
            let x = x()?;
            Box::new(move || x.affine(0.5, 0.25))
        }
        "add" => {
            let (a, b) = (x()?, uniform(&s[1], dt, dev)?);
            Box::new(move || &a + &b)
        }
        "add broadcast row" => {
            let (a, b) = (x()?, uniform(&s[1], dt, dev)?);
            Box::new(move || a.broadcast_add(&b))
        }
        "cast to the other float" => {
            let x = x()?;
            let to = if dt == DType::F32 {
                DType::BF16
            } else {
                DType::F32
            };
            Box::new(move || x.to_dtype(to))
        }
        "where_cond" => {
            let mask = uniform(&s[0], DType::F32, dev)?.ge(0f64)?;
            let (a, b) = (uniform(&s[1], dt, dev)?, uniform(&s[2], dt, dev)?);
            Box::new(move || mask.where_cond(&a, &b))
        }
        "sum last dim" => {
            let x = x()?;
            Box::new(move || x.sum_keepdim(D::Minus1))
        }
        "sum all" => {
            let x = x()?;
            Box::new(move || x.sum_all())
        }
        "max last dim" => {
            let x = x()?;
            Box::new(move || x.max_keepdim(D::Minus1))
        }
        "argmax last dim" => {
            let x = x()?;
            Box::new(move || x.argmax_keepdim(D::Minus1))
        }
        "softmax last dim" => {
            let x = x()?;
            Box::new(move || candle_nn::ops::softmax_last_dim(&x))
        }
        "rms_norm" => {
            let x = x()?;
            let alpha = uniform(&[s[0][1]], dt, dev)?;
            Box::new(move || candle_nn::ops::rms_norm(&x, &alpha, 1e-5))
        }
        "layer_norm" => {
            let x = x()?;
            let alpha = uniform(&[s[0][1]], dt, dev)?;
            let beta = uniform(&[s[0][1]], dt, dev)?;
            Box::new(move || candle_nn::ops::layer_norm(&x, &alpha, &beta, 1e-5))
        }
        "rope" | "rope_i" => {
            let x = x()?;
            let (t, d) = (s[0][2], s[0][3]);
            let cos = uniform(&[t, d / 2], dt, dev)?;
            let sin = uniform(&[t, d / 2], dt, dev)?;
            if case.op == "rope" {
                Box::new(move || candle_nn::rotary_emb::rope(&x, &cos, &sin))
            } else {
                Box::new(move || candle_nn::rotary_emb::rope_i(&x, &cos, &sin))
            }
        }
        "index_select rows" => {
            let table = x()?;
            let i = ids(&s[1], s[0][0], dev)?;
            Box::new(move || table.index_select(&i, 0))
        }
        "gather last dim" => {
            let x = x()?;
            let i = ids(&s[1], s[0][1], dev)?;
            Box::new(move || x.gather(&i, D::Minus1))
        }
        "index_add rows" => {
            let x = x()?;
            let i = ids(&s[1], s[0][0], dev)?;
            let src = uniform(&s[2], dt, dev)?;
            Box::new(move || x.index_add(&i, &src, 0))
        }
        "scatter_add last dim" => {
            let x = x()?;
            let i = ids(&s[1], s[0][1], dev)?;
            let src = uniform(&s[2], dt, dev)?;
            Box::new(move || x.scatter_add(&i, &src, D::Minus1))
        }
        "matmul" | "batched matmul q k^t" => {
            let (a, b) = (x()?, uniform(&s[1], dt, dev)?);
            Box::new(move || a.matmul(&b))
        }
        "conv2d 3x3" => {
            let (x, w) = (x()?, uniform(&s[1], dt, dev)?);
            let (pad, stride) = (case.params[0], case.params[1]);
            Box::new(move || x.conv2d(&w, pad, stride, 1, 1))
        }
        "conv_transpose2d 4x4 stride 2" => {
            let (x, w) = (x()?, uniform(&s[1], dt, dev)?);
            let (pad, stride) = (case.params[0], case.params[1]);
            Box::new(move || x.conv_transpose2d(&w, pad, 0, stride, 1))
        }
        "max_pool2d 2x2" => {
            let x = x()?;
            let k = case.params[0];
            Box::new(move || x.max_pool2d(k))
        }
        "avg_pool2d 2x2" => {
            let x = x()?;
            let k = case.params[0];
            Box::new(move || x.avg_pool2d(k))
        }
        other => candle_core::bail!("no such benchmark op: {other}"),
    };
    Ok(run)
}

/// Times every case (whose op contains `only`, if given) on every device; prints one JSON line
/// per (case, device).
pub fn run(devices: &[(&'static str, Device)], quick: bool, only: Option<&str>) -> Result<()> {
    for dtype in [DType::F32, DType::BF16] {
        for large in [true, false] {
            for case in cases(dtype, large)
                .into_iter()
                .filter(|c| only.is_none_or(|o| c.op.contains(o)))
            {
                for (name, dev) in devices {
                    let line = measure(&case, name, dev, quick);
                    println!("{line}");
                }
            }
        }
    }
    Ok(())
}

fn measure(case: &Case, device: &str, dev: &Device, quick: bool) -> serde_json::Value {
    let mut line = json!({
        "bench": "op",
        "family": case.family,
        "op": case.op,
        "dtype": case.dtype.as_str(),
        "size": if case.large { "large" } else { "small" },
        "shapes": case.shapes,
        "params": case.params,
        "device": device,
    });
    match case.work {
        Work::Bytes(b) => line["bytes"] = json!(b),
        Work::Flops(f) => line["flops"] = json!(f),
    }
    // a peer that panics on an op costs that row, not the run
    // launch-bound cases also time the host's part alone
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        build(case, dev).and_then(|mut f| {
            let wall = median_seconds_per_call(dev, &mut f, quick)?;
            let host = if case.large {
                None
            } else {
                Some(median_host_seconds_per_call(dev, &mut f, quick)?)
            };
            Ok((wall, host))
        })
    }))
    .unwrap_or_else(|_| Err(candle_core::Error::Msg("panicked".into())));
    match result {
        Ok((seconds, host)) => {
            line["us"] = json!(seconds * 1e6);
            if let Some(host) = host {
                line["host_us"] = json!(host * 1e6);
            }
        }
        Err(e) => {
            // a device that refuses an op is a row of the table, not the end of the run
            let msg = e.to_string();
            line["error"] = json!(msg.lines().next().unwrap_or_default());
        }
    }
    eprintln!(
        "{:<14} {:<32} {:<5} {:<5} {:<8} {}",
        case.family,
        case.op,
        case.dtype.as_str(),
        if case.large { "large" } else { "small" },
        device,
        line.get("us")
            .map(|v| format!("{:.2} us", v.as_f64().unwrap_or(f64::NAN)))
            .unwrap_or_else(|| format!("error: {}", line["error"]))
    );
    line
}
