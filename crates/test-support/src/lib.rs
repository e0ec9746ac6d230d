//! Helpers shared by the GPU tests of the op crates: host data as Candle CPU tensors, uploads
//! of a tensor's whole storage with the view's layout, the layout classes every op is tested
//! on, and comparisons with stated tolerances. Test code: it panics on failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod mma;

use std::sync::OnceLock;

use candle_core::{DType as CDType, Device as Cpu, Tensor};
use float8::F8E4M3;
use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rocm_device::{Buffer, DType, Device, Layout};

pub fn device() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| Device::new(0).expect("a GPU (set CANDLE_ROCM_PLATFORM)"))
        .clone()
}

/// Prints `what` when EW_TEST_VERBOSE is set (to find a slow or stuck case).
pub fn trace(what: impl FnOnce() -> String) {
    if std::env::var_os("EW_TEST_VERBOSE").is_some() {
        eprintln!("case: {}", what());
    }
}

pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

pub const ALL: [DType; 10] = DType::ALL;

pub fn cdtype(d: DType) -> CDType {
    match d {
        DType::U8 => CDType::U8,
        DType::U32 => CDType::U32,
        DType::I16 => CDType::I16,
        DType::I32 => CDType::I32,
        DType::I64 => CDType::I64,
        DType::BF16 => CDType::BF16,
        DType::F16 => CDType::F16,
        DType::F32 => CDType::F32,
        DType::F64 => CDType::F64,
        DType::F8E4M3 => CDType::F8E4M3,
    }
}

/// Random values of `dtype`: floats uniform in [lo, hi), integers over a range that exercises
/// wrapping (full range for the narrow ones, +-2^20 for the wide ones).
pub fn random(dtype: DType, n: usize, lo: f32, hi: f32, seed: u64) -> Vec<u8> {
    let mut r = rng(seed);
    let mut out = Vec::with_capacity(n * dtype.size_in_bytes());
    for _ in 0..n {
        let x: f32 = r.random_range(lo..hi);
        match dtype {
            DType::U8 => out.push(r.random::<u8>()),
            DType::U32 => out.extend(r.random_range(0u32..1 << 21).to_le_bytes()),
            DType::I16 => out.extend(r.random::<i16>().to_le_bytes()),
            DType::I32 => out.extend(r.random_range(-(1i32 << 20)..1 << 20).to_le_bytes()),
            DType::I64 => out.extend(r.random_range(-(1i64 << 40)..1 << 40).to_le_bytes()),
            DType::BF16 => out.extend(bf16::from_f32(x).to_bits().to_le_bytes()),
            DType::F16 => out.extend(f16::from_f32(x).to_bits().to_le_bytes()),
            DType::F32 => out.extend(x.to_le_bytes()),
            DType::F64 => {
                out.extend((f64::from(x) + f64::from(r.random::<f32>()) * 1e-7).to_le_bytes())
            }
            DType::F8E4M3 => out.push(F8E4M3::from_f32(x).to_bits()),
        }
    }
    out
}

/// A CPU tensor holding `bytes` of `dtype` with `dims`.
pub fn tensor(bytes: &[u8], dtype: DType, dims: &[usize]) -> Tensor {
    fn v<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }
    let cpu = &Cpu::Cpu;
    let t = match dtype {
        DType::U8 => Tensor::from_vec(bytes.to_vec(), dims, cpu),
        DType::U32 => Tensor::from_vec(v::<u32>(bytes), dims, cpu),
        DType::I16 => Tensor::from_vec(v::<i16>(bytes), dims, cpu),
        DType::I32 => Tensor::from_vec(v::<i32>(bytes), dims, cpu),
        DType::I64 => Tensor::from_vec(v::<i64>(bytes), dims, cpu),
        DType::BF16 => Tensor::from_vec(
            v::<u16>(bytes)
                .into_iter()
                .map(bf16::from_bits)
                .collect::<Vec<_>>(),
            dims,
            cpu,
        ),
        DType::F16 => Tensor::from_vec(
            v::<u16>(bytes)
                .into_iter()
                .map(f16::from_bits)
                .collect::<Vec<_>>(),
            dims,
            cpu,
        ),
        DType::F32 => Tensor::from_vec(v::<f32>(bytes), dims, cpu),
        DType::F64 => Tensor::from_vec(v::<f64>(bytes), dims, cpu),
        DType::F8E4M3 => Tensor::from_vec(
            bytes
                .iter()
                .map(|&b| F8E4M3::from_bits(b))
                .collect::<Vec<_>>(),
            dims,
            cpu,
        ),
    };
    t.expect("tensor from host bytes")
}

/// The elements of `t` (any layout) in row-major order, as bytes.
pub fn bytes_of(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        CDType::U8 => t.to_vec1::<u8>().unwrap(),
        CDType::U32 => bytemuck::cast_slice(&t.to_vec1::<u32>().unwrap()).to_vec(),
        CDType::I16 => bytemuck::cast_slice(&t.to_vec1::<i16>().unwrap()).to_vec(),
        CDType::I32 => bytemuck::cast_slice(&t.to_vec1::<i32>().unwrap()).to_vec(),
        CDType::I64 => bytemuck::cast_slice(&t.to_vec1::<i64>().unwrap()).to_vec(),
        CDType::BF16 => bytemuck::cast_slice(&t.to_vec1::<bf16>().unwrap()).to_vec(),
        CDType::F16 => bytemuck::cast_slice(&t.to_vec1::<f16>().unwrap()).to_vec(),
        CDType::F32 => bytemuck::cast_slice(&t.to_vec1::<f32>().unwrap()).to_vec(),
        CDType::F64 => bytemuck::cast_slice(&t.to_vec1::<f64>().unwrap()).to_vec(),
        CDType::F8E4M3 => t
            .to_vec1::<F8E4M3>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_bits())
            .collect(),
        other => panic!("no test data for {other:?}"),
    }
}

/// Element values as f64 (for float comparisons).
pub fn values(bytes: &[u8], dtype: DType) -> Vec<f64> {
    let w = dtype.size_in_bytes();
    bytes
        .chunks_exact(w)
        .map(|c| match dtype {
            DType::U8 => f64::from(c[0]),
            DType::U32 => f64::from(u32::from_le_bytes(c.try_into().unwrap())),
            DType::I16 => f64::from(i16::from_le_bytes(c.try_into().unwrap())),
            DType::I32 => f64::from(i32::from_le_bytes(c.try_into().unwrap())),
            DType::I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::BF16 => bf16::from_bits(u16::from_le_bytes(c.try_into().unwrap())).to_f64(),
            DType::F16 => f16::from_bits(u16::from_le_bytes(c.try_into().unwrap())).to_f64(),
            DType::F32 => f64::from(f32::from_le_bytes(c.try_into().unwrap())),
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::F8E4M3 => F8E4M3::from_bits(c[0]).to_f64(),
        })
        .collect()
}

/// Uploads the whole storage of `base` (contiguous) to the device.
pub fn upload(d: &Device, base: &Tensor) -> Buffer {
    let bytes = bytes_of(base);
    let buf = d.alloc(bytes.len()).unwrap();
    d.copy_htod(&bytes, &buf, 0).unwrap();
    buf
}

pub fn download(d: &Device, buf: &Buffer) -> Vec<u8> {
    let mut out = vec![0u8; buf.len()];
    d.copy_dtoh(buf, 0, &mut out).unwrap();
    out
}

/// The layout of a CPU view, for the device copy of its base.
pub fn layout_of(view: &Tensor) -> Layout {
    let l = view.layout();
    Layout::new(l.dims(), l.stride(), l.start_offset())
}

/// A view over a base tensor: the base is uploaded whole, the view's layout addresses it.
#[derive(Debug)]
pub struct Case {
    pub name: &'static str,
    pub base: Tensor,
    pub view: Tensor,
    /// How the view is made from its base.
    pub make_view: fn(&Tensor) -> Tensor,
}

impl Case {
    fn new(name: &'static str, base: Tensor, make_view: fn(&Tensor) -> Tensor) -> Self {
        Case {
            name,
            view: make_view(&base),
            base,
            make_view,
        }
    }

    /// The same view over another base of the same shape.
    pub fn with_base(&self, base: Tensor) -> Case {
        Case::new(self.name, base, self.make_view)
    }
}

/// The layout classes every elementwise op is tested on, for data of `dtype`.
pub fn layout_cases(dtype: DType, lo: f32, hi: f32, seed: u64) -> Vec<Case> {
    let make = |dims: &[usize], s: u64| {
        let n: usize = dims.iter().product();
        tensor(&random(dtype, n, lo, hi, seed ^ s), dtype, dims)
    };
    vec![
        Case::new("contiguous", make(&[3, 5, 7], 1), |b| b.clone()),
        Case::new("start offset", make(&[1003], 2), |b| {
            b.narrow(0, 3, 1000).unwrap()
        }),
        Case::new("transposed", make(&[17, 33], 3), |b| b.t().unwrap()),
        Case::new("broadcast rows", make(&[1, 33], 4), |b| {
            b.broadcast_as((9, 33)).unwrap()
        }),
        Case::new("broadcast cols", make(&[9, 1], 5), |b| {
            b.broadcast_as((9, 33)).unwrap()
        }),
        Case::new("narrowed", make(&[8, 40], 6), |b| {
            b.narrow(1, 5, 30).unwrap()
        }),
        Case::new("batched transpose", make(&[3, 17, 33], 10), |b| {
            b.transpose(1, 2).unwrap()
        }),
        // even strides and start, odd d0: the paired transpose kernel with edge elements
        Case::new("even transpose", make(&[2, 34, 70], 14), |b| {
            b.narrow(2, 2, 67).unwrap().transpose(1, 2).unwrap()
        }),
        Case::new("broadcast rows x64", make(&[1, 64], 11), |b| {
            b.broadcast_as((9, 64)).unwrap()
        }),
        Case::new("broadcast cols x64", make(&[9, 1], 12), |b| {
            b.broadcast_as((9, 64)).unwrap()
        }),
        Case::new("contiguous 9x64", make(&[9, 64], 13), |b| b.clone()),
        Case::new("empty", make(&[0, 5], 7), |b| b.clone()),
        Case::new("one element", make(&[1], 8), |b| b.clone()),
        Case::new("long, odd tail", make(&[(1 << 16) + 5], 9), |b| {
            b.narrow(0, 1, (1 << 16) + 3).unwrap()
        }),
    ]
}

/// Absolute and relative tolerance of float results, by dtype: about one unit in the last
/// place of the dtype for single-rounding ops (f32/f64 allow for libm vs device libm).
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-13, 1e-12),
        DType::F32 => (1e-6, 1e-5),
        DType::F16 => (1e-3, 2e-3),
        DType::BF16 => (8e-3, 8e-3),
        DType::F8E4M3 => (2e-2, 0.13),
        _ => (0.0, 0.0),
    }
}

/// Compares results: integers bit for bit, floats by value within (atol + rtol * |want|)
/// scaled by `slack`, NaN equal to NaN. Returns a description of the first mismatch.
pub fn compare(got: &[u8], want: &[u8], dtype: DType, slack: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} bytes, expected {}", got.len(), want.len()));
    }
    if dtype.is_int() {
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let e = i / dtype.size_in_bytes();
            return Err(format!(
                "element {e}: {} vs {}",
                values(got, dtype)[e],
                values(want, dtype)[e]
            ));
        }
        return Ok(());
    }
    let (atol, rtol) = tolerance(dtype);
    let (g, w) = (values(got, dtype), values(want, dtype));
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan())
            || a == b
            || (a - b).abs() <= slack * (atol + rtol * b.abs());
        if !ok {
            return Err(format!("element {i}: got {a}, expected {b}"));
        }
    }
    Ok(())
}
