//! GPU tests of candle-rocm: every `BackendStorage` and `BackendDevice` method (and the fused
//! ops) through the inherent API, against candle-core 0.11.1's `CpuStorage` called with the
//! same layouts (Tensor-level calls where Candle's parameter types are crate-private: the
//! convolutions; candle-nn for the fused ops).
//!
//! One file, one test binary: each GPU test binary links Candle's CPU reference and travels in
//! the GPU pack, so a crate's GPU suite stays one target (the pack's size and link time).
//!
//! Each (method, dtype) cell of the table the suite prints is one of:
//! - `ok`: both backends compute it and agree (on every layout class and case tried);
//! - `-`: both refuse it with an error;
//! - `+`: we compute what the CPU refuses;
//! - `gap`: the CPU computes it and we refuse (only the declared [`KNOWN_GAPS`] may be);
//! - `FAIL`: anything else (a mismatch, or an undeclared gap).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use candle_core::backend::BackendStorage;
use candle_core::{op, CpuStorage, Shape, Tensor};
use candle_rocm::*;
use float8::F8E4M3;
use half::{bf16, f16};
use rocm_test_support::{compare, random, tensor, trace};

const ALL: [DType; 10] = DType::ALL;

/// (method, dtype) cells the CPU computes and we refuse, with the reason in the README table:
/// Candle's CPU backend computes transposed convolutions of f8e4m3 with a direct loop in f8
/// arithmetic; ours go through the BLAS, which has no f8 gemm.
const KNOWN_GAPS: &[(&str, DType)] = &[
    ("conv_transpose1d", DType::F8E4M3),
    ("conv_transpose2d", DType::F8E4M3),
];

fn device() -> RocmDevice {
    RocmDevice::from_device(rocm_test_support::device(), candle_rocm::Options::global())
}

fn cpu_of(bytes: &[u8], dt: DType) -> CpuStorage {
    fn v<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }
    match dt {
        DType::U8 => CpuStorage::U8(bytes.to_vec()),
        DType::U32 => CpuStorage::U32(v(bytes)),
        DType::I16 => CpuStorage::I16(v(bytes)),
        DType::I32 => CpuStorage::I32(v(bytes)),
        DType::I64 => CpuStorage::I64(v(bytes)),
        DType::BF16 => CpuStorage::BF16(v::<u16>(bytes).into_iter().map(bf16::from_bits).collect()),
        DType::F16 => CpuStorage::F16(v::<u16>(bytes).into_iter().map(f16::from_bits).collect()),
        DType::F32 => CpuStorage::F32(v(bytes)),
        DType::F64 => CpuStorage::F64(v(bytes)),
        DType::F8E4M3 => CpuStorage::F8E4M3(bytes.iter().map(|&b| F8E4M3::from_bits(b)).collect()),
    }
}

fn bytes_of_cpu(c: &CpuStorage) -> (DType, Vec<u8>) {
    fn b<T: bytemuck::Pod>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }
    match c {
        CpuStorage::U8(v) => (DType::U8, v.clone()),
        CpuStorage::U32(v) => (DType::U32, b(v)),
        CpuStorage::I16(v) => (DType::I16, b(v)),
        CpuStorage::I32(v) => (DType::I32, b(v)),
        CpuStorage::I64(v) => (DType::I64, b(v)),
        CpuStorage::BF16(v) => (DType::BF16, b(v)),
        CpuStorage::F16(v) => (DType::F16, b(v)),
        CpuStorage::F32(v) => (DType::F32, b(v)),
        CpuStorage::F64(v) => (DType::F64, b(v)),
        CpuStorage::F8E4M3(v) => (DType::F8E4M3, v.iter().map(|x| x.to_bits()).collect()),
        other => panic!("no test data for {:?}", other.dtype()),
    }
}

fn cl(l: &Layout) -> candle_core::Layout {
    candle_core::Layout::new(Shape::from(l.dims.clone()), l.strides.clone(), l.start)
}

fn cdt(d: DType) -> candle_core::DType {
    rocm_test_support::cdtype(d)
}

/// One value on both backends: host bytes, the CPU storage and the device storage.
struct Pair {
    cpu: CpuStorage,
    gpu: RocmStorage,
}

fn pair(d: &RocmDevice, dt: DType, len: usize, lo: f32, hi: f32, seed: u64) -> Pair {
    let bytes = random(dt, len, lo, hi, seed);
    Pair {
        cpu: cpu_of(&bytes, dt),
        gpu: d.storage_from_bytes(dt, &bytes).unwrap(),
    }
}

/// The layout classes of (3, 5, 7) views: (name, elements of the base, layout).
fn layouts() -> Vec<(&'static str, usize, Layout)> {
    vec![
        ("contiguous", 105, Layout::new(&[3, 5, 7], &[35, 7, 1], 0)),
        ("offset", 121, Layout::new(&[3, 5, 7], &[40, 8, 1], 2)),
        ("transposed", 105, Layout::new(&[3, 5, 7], &[1, 3, 15], 0)),
        ("broadcast", 35, Layout::new(&[3, 5, 7], &[0, 7, 1], 0)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    NotRun,
    Ok,
    BothRefuse,
    Extra,
    Gap,
    Fail,
}

impl Cell {
    fn merge(self, other: Cell) -> Cell {
        use Cell::*;
        let rank = |c: Cell| match c {
            NotRun => 0,
            BothRefuse => 1,
            Extra => 2,
            Ok => 3,
            Gap => 4,
            Fail => 5,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }

    fn text(self) -> &'static str {
        match self {
            Cell::NotRun => " ",
            Cell::Ok => "ok",
            Cell::BothRefuse => "-",
            Cell::Extra => "+",
            Cell::Gap => "gap",
            Cell::Fail => "FAIL",
        }
    }
}

/// The method x dtype table and the failures behind it.
#[derive(Default)]
struct Table {
    cells: BTreeMap<String, [Cell; 10]>,
    failures: Vec<String>,
    cases: usize,
}

impl Table {
    fn mark(&mut self, method: &str, dt: DType, cell: Cell) {
        let i = ALL.iter().position(|&d| d == dt).unwrap();
        let row = self
            .cells
            .entry(method.to_string())
            .or_insert([Cell::NotRun; 10]);
        row[i] = row[i].merge(cell);
    }

    /// Runs one case on both backends and records the outcome for (method, dtype).
    fn case(
        &mut self,
        method: &str,
        dt: DType,
        what: &str,
        slack: f64,
        cpu: impl FnOnce() -> candle_core::Result<CpuStorage>,
        gpu: impl FnOnce() -> Result<RocmStorage>,
    ) {
        trace(|| format!("{method} {dt} {what}"));
        self.cases += 1;
        let cpu = catch_unwind(AssertUnwindSafe(cpu))
            .unwrap_or_else(|_| Err(candle_core::Error::Msg("the CPU backend panicked".into())));
        let gpu = gpu();
        let cell = match (cpu, gpu) {
            (Ok(c), Ok(g)) => {
                let (cdt, want) = bytes_of_cpu(&c);
                let got = g.to_host_bytes().unwrap();
                if cdt != g.dtype() {
                    self.failures.push(format!(
                        "{method} {dt} {what}: dtype {} vs {cdt}",
                        g.dtype()
                    ));
                    Cell::Fail
                } else if let Err(e) = compare(&got, &want, cdt, slack) {
                    self.failures.push(format!("{method} {dt} {what}: {e}"));
                    Cell::Fail
                } else {
                    Cell::Ok
                }
            }
            (Err(_), Err(_)) => Cell::BothRefuse,
            (Err(_), Ok(_)) => Cell::Extra,
            (Ok(_), Err(e)) => {
                if KNOWN_GAPS.contains(&(method, dt)) {
                    Cell::Gap
                } else {
                    self.failures.push(format!(
                        "{method} {dt} {what}: we refuse what the CPU computes: {e}"
                    ));
                    Cell::Fail
                }
            }
        };
        self.mark(method, dt, cell);
    }

    /// Prints the table and panics with every failure.
    fn finish(self, title: &str) {
        println!("\n{title}: {} cases\n", self.cases);
        let head: Vec<&str> = ALL.iter().map(|d| d.as_str()).collect();
        println!("| method | {} |", head.join(" | "));
        println!("|---|{}", "---|".repeat(ALL.len()));
        for (method, row) in &self.cells {
            let cells: Vec<&str> = row.iter().map(|c| c.text()).collect();
            println!("| {method} | {} |", cells.join(" | "));
        }
        assert!(
            self.failures.is_empty(),
            "{} failures:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

/// Float results of transcendental ops may differ from the CPU's libm by a few ulps.
const MATH_SLACK: f64 = 4.0;

macro_rules! cpu_unary {
    ($c:expr, $l:expr, $op:expr, [$($name:ident),*]) => {
        match $op {
            $(UnaryOp::$name => $c.unary_impl::<op::$name>($l),)*
            other => panic!("no CPU op for {other:?}"),
        }
    };
}

macro_rules! cpu_binary {
    ($c:expr, $r:expr, $l:expr, $rl:expr, $op:expr, [$($name:ident),*]) => {
        match $op {
            $(BinaryOp::$name => $c.binary_impl::<op::$name>($r, $l, $rl),)*
        }
    };
}

#[test]
fn elementwise_methods_match_the_cpu() {
    let d = device();
    let mut t = Table::default();
    let unary_ops: Vec<UnaryOp> = UnaryOp::ALL
        .into_iter()
        .filter(|o| !matches!(o, UnaryOp::NormCdf | UnaryOp::Sigmoid))
        .collect();
    for dt in ALL {
        for (i, (name, base, l)) in layouts().into_iter().enumerate() {
            let x = pair(&d, dt, base, -3.0, 3.0, i as u64);
            let lc = cl(&l);
            t.case(
                "affine",
                dt,
                name,
                2.0,
                || x.cpu.affine(&lc, 1.5, -0.5),
                || x.gpu.affine(&l, 1.5, -0.5),
            );
            t.case(
                "powf",
                dt,
                name,
                MATH_SLACK,
                || x.cpu.powf(&lc, 1.7),
                || x.gpu.powf(&l, 1.7),
            );
            t.case(
                "elu",
                dt,
                name,
                MATH_SLACK,
                || x.cpu.elu(&lc, 0.8),
                || x.gpu.elu(&l, 0.8),
            );
            for op in &unary_ops {
                t.case(
                    "unary_impl",
                    dt,
                    op.name(),
                    MATH_SLACK,
                    || {
                        cpu_unary!(
                            x.cpu,
                            &lc,
                            *op,
                            [
                                Neg, Recip, Exp, Log, Sin, Cos, Tanh, Erf, Ceil, Floor, Round, Abs,
                                Sqr, Sqrt, Gelu, GeluErf, Relu, Silu, Sign
                            ]
                        )
                    },
                    || x.gpu.unary(*op, &l),
                );
            }
            for to in ALL {
                // Candle 0.11.1's CPU f8e4m3 -> f64 never returns: go through f32 (exact).
                let cpu = || {
                    if dt == DType::F8E4M3 && to == DType::F64 {
                        let f = x.cpu.to_dtype(&lc, candle_core::DType::F32)?;
                        f.to_dtype(&candle_core::Layout::contiguous(lc.shape()), cdt(to))
                    } else {
                        x.cpu.to_dtype(&lc, cdt(to))
                    }
                };
                t.case("to_dtype", dt, to.as_str(), 1.0, cpu, || {
                    x.gpu.to_dtype(&l, to)
                });
            }
            // Binary ops and comparisons: this class against the next one.
            let (_, rbase, rl) = layouts().remove((i + 1) % 4);
            let y = pair(&d, dt, rbase, -3.0, 3.0, 100 + i as u64);
            let rlc = cl(&rl);
            for op in BinaryOp::ALL {
                t.case(
                    "binary_impl",
                    dt,
                    op.name(),
                    1.0,
                    || {
                        cpu_binary!(
                            x.cpu,
                            &y.cpu,
                            &lc,
                            &rlc,
                            op,
                            [Add, Sub, Mul, Div, Maximum, Minimum]
                        )
                    },
                    || x.gpu.binary(op, &y.gpu, &l, &rl),
                );
            }
            for (op, cop) in [
                (CmpOp::Eq, op::CmpOp::Eq),
                (CmpOp::Ne, op::CmpOp::Ne),
                (CmpOp::Lt, op::CmpOp::Lt),
                (CmpOp::Le, op::CmpOp::Le),
                (CmpOp::Gt, op::CmpOp::Gt),
                (CmpOp::Ge, op::CmpOp::Ge),
            ] {
                t.case(
                    "cmp",
                    dt,
                    name,
                    0.0,
                    || x.cpu.cmp(cop, &y.cpu, &lc, &rlc),
                    || x.gpu.cmp(op, &y.gpu, &l, &rl),
                );
            }
            // where_cond: a u8 condition (CPU accepts integer conditions).
            let c = pair(&d, DType::U8, rbase, 0.0, 1.0, 7 + i as u64);
            t.case(
                "where_cond",
                dt,
                name,
                0.0,
                || c.cpu.where_cond(&rlc, &x.cpu, &lc, &y.cpu, &rlc),
                || c.gpu.where_cond(&rl, &x.gpu, &l, &y.gpu, &rl),
            );
            // Copies.
            let copy_case = |t: &mut Table| {
                let mut cdst = cpu_of(&vec![0u8; 110 * dt.size_in_bytes()], dt);
                let mut gdst = d.zeros(110, dt).unwrap();
                let cres = x.cpu.copy_strided_src(&mut cdst, 3, &lc).map(|_| cdst);
                let gres = x.gpu.copy_strided_src(&mut gdst, 3, &l).map(|_| gdst);
                t.case("copy_strided_src", dt, name, 0.0, || cres, || gres);
            };
            copy_case(&mut t);
            t.case(
                "try_clone",
                dt,
                name,
                0.0,
                || x.cpu.try_clone(&lc),
                || x.gpu.try_clone(&l),
            );
            let mut cset = x.cpu.try_clone(&lc).unwrap();
            let mut gset = x.gpu.try_clone(&l).unwrap();
            let value = match dt {
                DType::U8 => Scalar::U8(7),
                DType::U32 => Scalar::U32(7),
                DType::I16 => Scalar::I16(-7),
                DType::I32 => Scalar::I32(-7),
                DType::I64 => Scalar::I64(-7),
                DType::BF16 => Scalar::BF16(bf16::from_f32(-1.5)),
                DType::F16 => Scalar::F16(f16::from_f32(-1.5)),
                DType::F32 => Scalar::F32(-1.5),
                DType::F64 => Scalar::F64(-1.5),
                DType::F8E4M3 => Scalar::F8E4M3(F8E4M3::from_f32(-1.5).to_bits()),
            };
            let cvalue = match value {
                Scalar::U8(v) => candle_core::scalar::Scalar::U8(v),
                Scalar::U32(v) => candle_core::scalar::Scalar::U32(v),
                Scalar::I16(v) => candle_core::scalar::Scalar::I16(v),
                Scalar::I32(v) => candle_core::scalar::Scalar::I32(v),
                Scalar::I64(v) => candle_core::scalar::Scalar::I64(v),
                Scalar::BF16(v) => candle_core::scalar::Scalar::BF16(v),
                Scalar::F16(v) => candle_core::scalar::Scalar::F16(v),
                Scalar::F32(v) => candle_core::scalar::Scalar::F32(v),
                Scalar::F64(v) => candle_core::scalar::Scalar::F64(v),
                Scalar::F8E4M3(b) => candle_core::scalar::Scalar::F8E4M3(F8E4M3::from_bits(b)),
            };
            // const_set on a narrowed view of the copy (the rest must stay as it was).
            let view = Layout::new(&[2, 5, 6], &l.strides, l.start);
            let cres = cset.const_set(cvalue, &cl(&view)).map(|_| cset);
            let gres = gset.const_set(value, &view).map(|_| gset);
            t.case("const_set", dt, name, 0.0, || cres, || gres);
        }
        // copy2d: 4 rows of 6 from a (5, 9) source into a (6, 11) destination.
        let x = pair(&d, dt, 45, -3.0, 3.0, 55);
        let mut cdst = cpu_of(&vec![0u8; 66 * dt.size_in_bytes()], dt);
        let mut gdst = d.zeros(66, dt).unwrap();
        let cres = x.cpu.copy2d(&mut cdst, 4, 6, 9, 11, 2, 12).map(|_| cdst);
        let block = candle_rocm::Copy2d {
            rows: 4,
            cols: 6,
            src_stride: 9,
            dst_stride: 11,
            src_offset: 2,
            dst_offset: 12,
        };
        let gres = x.gpu.copy2d(&mut gdst, &block).map(|_| gdst);
        t.case("copy2d", dt, "4x6", 0.0, || cres, || gres);
        // to_cpu_storage of the whole storage.
        t.case(
            "to_cpu_storage",
            dt,
            "whole",
            0.0,
            || Ok(x.cpu.clone()),
            || x.gpu.try_clone(&Layout::contiguous(&[45])),
        );
    }
    t.finish("elementwise methods");
}

#[test]
fn reductions_and_matmul_match_the_cpu() {
    let d = device();
    let mut t = Table::default();
    for dt in ALL {
        for (i, (name, base, l)) in layouts().into_iter().enumerate() {
            let x = pair(&d, dt, base, -3.0, 3.0, 20 + i as u64);
            let lc = cl(&l);
            for dims in [&[2usize][..], &[0], &[1], &[0, 2], &[0, 1, 2]] {
                for (op, cop) in [
                    (ReduceOp::Sum, op::ReduceOp::Sum),
                    (ReduceOp::Min, op::ReduceOp::Min),
                    (ReduceOp::Max, op::ReduceOp::Max),
                    (ReduceOp::ArgMin, op::ReduceOp::ArgMin),
                    (ReduceOp::ArgMax, op::ReduceOp::ArgMax),
                ] {
                    // Sums of 16-bit and 8-bit floats: the CPU adds in the dtype, we in f32.
                    let slack = if dt.size_in_bytes() <= 2 && dt.is_float() {
                        64.0
                    } else {
                        8.0
                    };
                    t.case(
                        "reduce_op",
                        dt,
                        &format!("{name} {op:?} {dims:?}"),
                        slack,
                        || x.cpu.reduce_op(cop, &lc, dims),
                        || x.gpu.reduce_op(op, &l, dims),
                    );
                }
            }
        }
        // matmul: (2, 3, 4) x (2, 4, 5), rhs transposed, and a broadcast rhs.
        let a = pair(&d, dt, 24, -1.0, 1.0, 30);
        let b = pair(&d, dt, 40, -1.0, 1.0, 31);
        let al = Layout::contiguous(&[2, 3, 4]);
        for (what, bl) in [
            ("contiguous", Layout::contiguous(&[2, 4, 5])),
            ("transposed rhs", Layout::new(&[2, 4, 5], &[20, 1, 4], 0)),
            ("broadcast rhs", Layout::new(&[2, 4, 5], &[0, 5, 1], 0)),
        ] {
            t.case(
                "matmul",
                dt,
                what,
                16.0,
                || a.cpu.matmul(&b.cpu, (2, 3, 5, 4), &cl(&al), &cl(&bl)),
                || a.gpu.matmul(&b.gpu, (2, 3, 5, 4), &al, &bl),
            );
        }
    }
    t.finish("reductions and matmul");
}

#[test]
fn indexing_methods_match_the_cpu() {
    let d = device();
    let mut t = Table::default();
    for dt in ALL {
        for ids_dt in [DType::U8, DType::U32, DType::I64] {
            let x = pair(&d, dt, 4 * 6 * 5, -3.0, 3.0, 40);
            let xl = Layout::contiguous(&[4, 6, 5]);
            let xt = Layout::new(&[4, 6, 5], &[1, 20, 4], 0);
            // index_select along dim 1 with strided ids (every other of 10).
            let raw: Vec<i64> = vec![5, 0, 3, 3, 1, 2, 4, 0, 5, 1];
            let ids_bytes = |v: &[i64]| -> Vec<u8> {
                v.iter()
                    .flat_map(|&i| i.to_le_bytes()[..ids_dt.size_in_bytes()].to_vec())
                    .collect()
            };
            let ids = Pair {
                cpu: cpu_of(&ids_bytes(&raw), ids_dt),
                gpu: d.storage_from_bytes(ids_dt, &ids_bytes(&raw)).unwrap(),
            };
            let il = Layout::new(&[5], &[2], 0);
            for (what, l) in [("contiguous", &xl), ("transposed", &xt)] {
                t.case(
                    "index_select",
                    dt,
                    what,
                    0.0,
                    || x.cpu.index_select(&ids.cpu, &cl(l), &cl(&il), 1),
                    || x.gpu.index_select(&ids.gpu, l, &il, 1),
                );
            }
            // gather / scatter / scatter_add along dim 2 with (4, 6, 3) ids.
            let graw: Vec<i64> = (0..72).map(|i| (i * 7 % 5) as i64).collect();
            let gids = Pair {
                cpu: cpu_of(&ids_bytes(&graw), ids_dt),
                gpu: d.storage_from_bytes(ids_dt, &ids_bytes(&graw)).unwrap(),
            };
            let gl = Layout::contiguous(&[4, 6, 3]);
            // The CPU gathers from contiguous sources only (a transposed one is `+`).
            for (what, l) in [("contiguous", &xl), ("transposed", &xt)] {
                t.case(
                    "gather",
                    dt,
                    what,
                    0.0,
                    || x.cpu.gather(&cl(l), &gids.cpu, &cl(&gl), 2),
                    || x.gpu.gather(l, &gids.gpu, &gl, 2),
                );
            }
            let src = pair(&d, dt, 72, -3.0, 3.0, 41);
            let sl = Layout::contiguous(&[4, 6, 3]);
            // Ids in [0, 5) for scatter_set, repeated within rows (the last update wins on
            // both backends).
            let sraw: Vec<i64> = (0..72).map(|i| ((i % 3) + (i / 3) % 3) as i64).collect();
            let sids = Pair {
                cpu: cpu_of(&ids_bytes(&sraw), ids_dt),
                gpu: d.storage_from_bytes(ids_dt, &ids_bytes(&sraw)).unwrap(),
            };
            for add in [false, true] {
                let method = if add {
                    "scatter_add_set"
                } else {
                    "scatter_set"
                };
                let mut cdst = x.cpu.try_clone(&cl(&xl)).unwrap();
                let mut gdst = x.gpu.try_clone(&xl).unwrap();
                let ids = if add { &gids } else { &sids };
                let (cres, gres) = if add {
                    (
                        cdst.scatter_add_set(&cl(&xl), &ids.cpu, &cl(&gl), &src.cpu, &cl(&sl), 2)
                            .map(|_| cdst),
                        gdst.scatter_add_set(&xl, &ids.gpu, &gl, &src.gpu, &sl, 2)
                            .map(|_| gdst),
                    )
                } else {
                    (
                        cdst.scatter_set(&cl(&xl), &ids.cpu, &cl(&gl), &src.cpu, &cl(&sl), 2)
                            .map(|_| cdst),
                        gdst.scatter_set(&xl, &ids.gpu, &gl, &src.gpu, &sl, 2)
                            .map(|_| gdst),
                    )
                };
                // Atomic float sums may round in another order.
                t.case(method, dt, ids_dt.as_str(), 4.0, || cres, || gres);
            }
            // index_add along dim 0 of a transposed view: 3 rows of src into 4.
            let araw: Vec<i64> = vec![2, 0, 2];
            let aids = Pair {
                cpu: cpu_of(&ids_bytes(&araw), ids_dt),
                gpu: d.storage_from_bytes(ids_dt, &ids_bytes(&araw)).unwrap(),
            };
            let asrc = pair(&d, dt, 90, -3.0, 3.0, 42);
            let asl = Layout::contiguous(&[3, 6, 5]);
            let al = Layout::contiguous(&[3]);
            t.case(
                "index_add",
                dt,
                ids_dt.as_str(),
                4.0,
                || {
                    x.cpu
                        .index_add(&cl(&xt), &aids.cpu, &cl(&al), &asrc.cpu, &cl(&asl), 0)
                },
                || x.gpu.index_add(&xt, &aids.gpu, &al, &asrc.gpu, &asl, 0),
            );
        }
        // Upsampling and pooling of a (2, 3, 4, 5) view.
        let x = pair(&d, dt, 2 * 3 * 4 * 6, -3.0, 3.0, 43);
        let l = Layout::new(&[2, 3, 4, 5], &[72, 24, 6, 1], 1);
        let lc = cl(&l);
        t.case(
            "upsample_nearest2d",
            dt,
            "7x9",
            0.0,
            || x.cpu.upsample_nearest2d(&lc, 7, 9),
            || x.gpu.upsample_nearest2d(&l, 7, 9),
        );
        // Candle 0.11.1's CPU bilinear of f8e4m3 converts to f64, which never returns: its
        // reference is the f32 computation (f8e4m3 values are exact in f32) rounded to f8e4m3.
        let bilinear = |h, w, align, scales: Option<f64>| {
            if dt != DType::F8E4M3 {
                return x.cpu.upsample_bilinear2d(&lc, h, w, align, scales, scales);
            }
            let f = x.cpu.to_dtype(&lc, candle_core::DType::F32)?;
            let f_l = candle_core::Layout::contiguous(lc.shape());
            let r = f.upsample_bilinear2d(&f_l, h, w, align, scales, scales)?;
            let r_l = candle_core::Layout::contiguous((2, 3, h, w));
            r.to_dtype(&r_l, candle_core::DType::F8E4M3)
        };
        t.case(
            "upsample_bilinear2d",
            dt,
            "7x9",
            1.0,
            || bilinear(7, 9, false, None),
            || x.gpu.upsample_bilinear2d(&l, 7, 9, false, None, None),
        );
        t.case(
            "upsample_bilinear2d",
            dt,
            "align, scales",
            1.0,
            || bilinear(8, 10, true, Some(2.0)),
            || {
                x.gpu
                    .upsample_bilinear2d(&l, 8, 10, true, Some(2.0), Some(2.0))
            },
        );
        t.case(
            "avg_pool2d",
            dt,
            "2x2/2",
            0.0,
            || x.cpu.avg_pool2d(&lc, (2, 2), (2, 2)),
            || x.gpu.avg_pool2d(&l, (2, 2), (2, 2)),
        );
        t.case(
            "max_pool2d",
            dt,
            "3x2/1",
            0.0,
            || x.cpu.max_pool2d(&lc, (3, 2), (1, 1)),
            || x.gpu.max_pool2d(&l, (3, 2), (1, 1)),
        );
        let l1 = Layout::new(&[2, 3, 5], &[24, 6, 1], 1);
        t.case(
            "upsample_nearest1d",
            dt,
            "11",
            0.0,
            || x.cpu.upsample_nearest1d(&cl(&l1), 11),
            || x.gpu.upsample_nearest1d(&l1, 11),
        );
    }
    t.finish("indexing, upsampling, pooling");
}

/// A CPU tensor whose storage is `bytes` (contiguous `dims`).
fn ctensor(bytes: &[u8], dt: DType, dims: &[usize]) -> Tensor {
    tensor(bytes, dt, dims)
}

fn cpu_of_tensor(t: &Tensor) -> CpuStorage {
    let bytes = rocm_test_support::bytes_of(t);
    let dt = match t.dtype() {
        candle_core::DType::U8 => DType::U8,
        candle_core::DType::U32 => DType::U32,
        candle_core::DType::I16 => DType::I16,
        candle_core::DType::I32 => DType::I32,
        candle_core::DType::I64 => DType::I64,
        candle_core::DType::BF16 => DType::BF16,
        candle_core::DType::F16 => DType::F16,
        candle_core::DType::F32 => DType::F32,
        candle_core::DType::F64 => DType::F64,
        _ => DType::F8E4M3,
    };
    cpu_of(&bytes, dt)
}

#[test]
fn convolutions_match_the_cpu() {
    let d = device();
    let mut t = Table::default();
    for dt in ALL {
        let xb = random(dt, 2 * 4 * 7 * 9, -1.0, 1.0, 60);
        let kb = random(dt, 6 * 4 * 3 * 3, -1.0, 1.0, 61);
        let (xg, kg) = (
            d.storage_from_bytes(dt, &xb).unwrap(),
            d.storage_from_bytes(dt, &kb).unwrap(),
        );
        // conv2d: input (2, 4, 7, 9), kernel (6, 4, 3, 3) read transposed from a (4, 6, 3, 3)
        // base; padding 1, stride 2.
        let x4 = ctensor(&xb, dt, &[2, 4, 7, 9]);
        let k4 = ctensor(&kb, dt, &[4, 6, 3, 3]).transpose(0, 1).unwrap();
        let (xl, kl) = (
            Layout::contiguous(&[2, 4, 7, 9]),
            Layout::new(&[6, 4, 3, 3], &[9, 54, 3, 1], 0),
        );
        let p2 = Conv2dParams {
            b_size: 2,
            i_h: 7,
            i_w: 9,
            k_h: 3,
            k_w: 3,
            c_out: 6,
            c_in: 4,
            padding: 1,
            stride: 2,
            dilation: 1,
            groups: 1,
        };
        t.case(
            "conv2d",
            dt,
            "p1 s2",
            64.0,
            || Ok(cpu_of_tensor(&x4.conv2d(&k4, 1, 2, 1, 1)?)),
            || xg.conv2d(&xl, &kg, &kl, &p2),
        );
        // conv_transpose2d: input (2, 6, 7, 9)... reuse the buffers as (2, 4, 7, 9) input
        // and (4, 6, 3, 3) kernel: c_in 4, c_out 6.
        let kt = ctensor(&kb, dt, &[4, 6, 3, 3]);
        let ktl = Layout::contiguous(&[4, 6, 3, 3]);
        let pt2 = ConvTranspose2dParams {
            b_size: 2,
            i_h: 7,
            i_w: 9,
            k_h: 3,
            k_w: 3,
            c_out: 6,
            c_in: 4,
            padding: 1,
            output_padding: 1,
            stride: 2,
            dilation: 1,
            groups: 1,
        };
        t.case(
            "conv_transpose2d",
            dt,
            "p1 op1 s2",
            64.0,
            || Ok(cpu_of_tensor(&x4.conv_transpose2d(&kt, 1, 1, 2, 1)?)),
            || xg.conv_transpose2d(&xl, &kg, &ktl, &pt2),
        );
        // conv1d: (2, 4, 63) with a contiguous (6, 4, 3) kernel (the CPU's conv1d misreads
        // strided kernels), padding 2, dilation 2.
        let x3 = ctensor(&xb, dt, &[2, 4, 63]);
        let k3 = ctensor(&kb[..6 * 4 * 3 * dt.size_in_bytes()], dt, &[6, 4, 3]);
        let (x3l, k3l) = (
            Layout::contiguous(&[2, 4, 63]),
            Layout::contiguous(&[6, 4, 3]),
        );
        let p1 = Conv1dParams {
            b_size: 2,
            l_in: 63,
            c_out: 6,
            c_in: 4,
            k_size: 3,
            padding: 2,
            stride: 1,
            dilation: 2,
            groups: 1,
        };
        t.case(
            "conv1d",
            dt,
            "p2 d2",
            64.0,
            || Ok(cpu_of_tensor(&x3.conv1d(&k3, 2, 1, 2, 1)?)),
            || xg.conv1d(&x3l, &kg, &k3l, &p1),
        );
        // conv_transpose1d: kernel (4, 6, 3), padding 1, stride 2 (the CPU's direct path).
        let kt3 = ctensor(&kb[..4 * 6 * 3 * dt.size_in_bytes()], dt, &[4, 6, 3]);
        let kt3l = Layout::contiguous(&[4, 6, 3]);
        let pt1 = ConvTranspose1dParams {
            b_size: 2,
            l_in: 63,
            c_out: 6,
            c_in: 4,
            k_size: 3,
            padding: 1,
            output_padding: 0,
            stride: 2,
            dilation: 1,
            groups: 1,
        };
        t.case(
            "conv_transpose1d",
            dt,
            "p1 s2",
            64.0,
            || Ok(cpu_of_tensor(&x3.conv_transpose1d(&kt3, 1, 0, 2, 1, 1)?)),
            || xg.conv_transpose1d(&x3l, &kg, &kt3l, &pt1),
        );
    }
    t.finish("convolutions");
}

#[test]
fn fused_ops_match_candle_nn() {
    let d = device();
    let mut t = Table::default();
    let cpu = |r: candle_core::Result<Tensor>| r.map(|x| cpu_of_tensor(&x));
    for dt in ALL {
        let xb = random(dt, 2 * 3 * 4 * 8, -2.0, 2.0, 70);
        let x = ctensor(&xb, dt, &[2, 3, 4, 8]);
        let xg = d.storage_from_bytes(dt, &xb).unwrap();
        let xl = Layout::contiguous(&[2, 3, 4, 8]);
        let ab = random(dt, 8, 0.5, 1.5, 71);
        let bb = random(dt, 8, -0.5, 0.5, 72);
        let (a, b) = (ctensor(&ab, dt, &[8]), ctensor(&bb, dt, &[8]));
        let (ag, bg) = (
            d.storage_from_bytes(dt, &ab).unwrap(),
            d.storage_from_bytes(dt, &bb).unwrap(),
        );
        let al = Layout::contiguous(&[8]);
        t.case(
            "softmax_last_dim",
            dt,
            "",
            4.0,
            || cpu(candle_nn::ops::softmax_last_dim(&x)),
            || xg.softmax_last_dim(&xl),
        );
        t.case(
            "rms_norm",
            dt,
            "",
            4.0,
            || cpu(candle_nn::ops::rms_norm(&x, &a, 1e-5)),
            || xg.rms_norm(&xl, &ag, &al, 1e-5),
        );
        t.case(
            "layer_norm",
            dt,
            "",
            8.0,
            || cpu(candle_nn::ops::layer_norm(&x, &a, &b, 1e-5)),
            || xg.layer_norm(&xl, &ag, &al, Some((&bg, &al)), 1e-5),
        );
        t.case(
            "sigmoid",
            dt,
            "",
            MATH_SLACK,
            || cpu(candle_nn::ops::sigmoid(&x)),
            || xg.sigmoid(&xl),
        );
        t.case(
            "arg_sort",
            dt,
            "asc",
            0.0,
            || cpu(x.arg_sort_last_dim(true)),
            || xg.arg_sort_last_dim(&xl, true),
        );
        t.case(
            "arg_sort",
            dt,
            "desc",
            0.0,
            || cpu(x.arg_sort_last_dim(false)),
            || xg.arg_sort_last_dim(&xl, false),
        );
        // rope: (b, h, t, d) = (2, 3, 4, 8) with (t, d/2) cos/sin; rope_thd: (b, t, h, d).
        let cb = random(dt, 16, -1.0, 1.0, 73);
        let sb = random(dt, 16, -1.0, 1.0, 74);
        let (c, s) = (ctensor(&cb, dt, &[4, 4]), ctensor(&sb, dt, &[4, 4]));
        let (cg, sg) = (
            d.storage_from_bytes(dt, &cb).unwrap(),
            d.storage_from_bytes(dt, &sb).unwrap(),
        );
        let csl = Layout::contiguous(&[4, 4]);
        t.case(
            "rope_i",
            dt,
            "",
            2.0,
            || cpu(candle_nn::rotary_emb::rope_i(&x, &c, &s)),
            || xg.rope(RopeVariant::Interleaved, &xl, &cg, &csl, &sg, &csl),
        );
        t.case(
            "rope",
            dt,
            "",
            2.0,
            || cpu(candle_nn::rotary_emb::rope(&x, &c, &s)),
            || xg.rope(RopeVariant::Halves, &xl, &cg, &csl, &sg, &csl),
        );
        let xthd = ctensor(&xb, dt, &[2, 4, 3, 8]);
        let xthdl = Layout::contiguous(&[2, 4, 3, 8]);
        t.case(
            "rope_thd",
            dt,
            "",
            2.0,
            || cpu(candle_nn::rotary_emb::rope_thd(&xthd, &c, &s)),
            || xg.rope(RopeVariant::Thd, &xthdl, &cg, &csl, &sg, &csl),
        );
    }
    t.finish("fused ops");
}

#[test]
fn device_methods() {
    let d = device();
    let cpu_dev = candle_core::cpu_backend::CpuDevice;
    use candle_core::backend::BackendDevice;
    let mut t = Table::default();
    for dt in ALL {
        // zeros_impl / alloc_uninit / storage_from_* (bytes round trip).
        t.case(
            "zeros_impl",
            dt,
            "",
            0.0,
            || cpu_dev.zeros_impl(&Shape::from(37), cdt(dt)),
            || d.zeros(37, dt),
        );
        let uninit = d.alloc_uninit(37, dt).unwrap();
        assert_eq!((uninit.len(), uninit.dtype()), (37, dt));
        t.mark("alloc_uninit", dt, Cell::Ok);
        let bytes = random(dt, 1001, -3.0, 3.0, 80);
        t.case(
            "storage_from_cpu_storage",
            dt,
            "",
            0.0,
            || Ok(cpu_of(&bytes, dt)),
            || d.storage_from_bytes(dt, &bytes),
        );
        // rand_uniform / rand_normal: the CPU's dtype support, our statistics.
        let n = 1 << 16;
        for normal in [false, true] {
            let method = if normal {
                "rand_normal"
            } else {
                "rand_uniform"
            };
            let cpu = if normal {
                cpu_dev.rand_normal(&Shape::from(n), cdt(dt), 1.0, 2.0)
            } else {
                cpu_dev.rand_uniform(&Shape::from(n), cdt(dt), -1.0, 3.0)
            };
            let gpu = if normal {
                d.rand_normal(n, dt, 1.0, 2.0)
            } else {
                d.rand_uniform(n, dt, -1.0, 3.0)
            };
            let cell = match (cpu, gpu) {
                (Ok(_), Ok(g)) | (Err(_), Ok(g)) => {
                    let v = rocm_test_support::values(&g.to_host_bytes().unwrap(), dt);
                    let mean = v.iter().sum::<f64>() / n as f64;
                    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
                    let (want_mean, want_var) = if normal {
                        (1.0, 4.0)
                    } else {
                        (1.0, 16.0 / 12.0)
                    };
                    let ok = (mean - want_mean).abs() < 0.05
                        && (var / want_var - 1.0).abs() < 0.05
                        && (normal || v.iter().all(|&x| (-1.0..=3.0).contains(&x)));
                    if !ok {
                        t.failures
                            .push(format!("{method} {dt}: mean {mean}, variance {var}"));
                        Cell::Fail
                    } else {
                        Cell::Ok
                    }
                }
                (Err(_), Err(_)) => Cell::BothRefuse,
                (Ok(_), Err(e)) => {
                    t.failures.push(format!("{method} {dt}: {e}"));
                    Cell::Fail
                }
            };
            t.mark(method, dt, cell);
        }
    }
    // Seeds: the same seed gives the same draw, another seed another one.
    d.set_seed(123).unwrap();
    assert_eq!(d.get_current_seed().unwrap(), 123);
    let draw = || {
        d.rand_uniform(4099, DType::F32, 0.0, 1.0)
            .unwrap()
            .to_host_bytes()
            .unwrap()
    };
    let (a, b) = (draw(), draw());
    d.set_seed(123).unwrap();
    let a2 = draw();
    d.set_seed(124).unwrap();
    let c = draw();
    assert_eq!(a, a2, "a seed reproduces its draws");
    assert_ne!(a, b, "consecutive draws differ");
    assert_ne!(a, c, "another seed draws other values");
    // location, same_device, synchronize, memory stats, transfers.
    assert_eq!(d.ordinal(), 0);
    assert!(d.same_device(&d.clone()));
    let other = RocmDevice::new(0).unwrap();
    assert!(!d.same_device(&other), "another handle has its own stream");
    d.synchronize().unwrap();
    let x = d
        .storage_from_bytes(DType::F32, &random(DType::F32, 1000, -1.0, 1.0, 90))
        .unwrap();
    let y = x.to_device(&other).unwrap();
    assert!(y.device().same_device(&other));
    assert_eq!(x.to_host_bytes().unwrap(), y.to_host_bytes().unwrap());
    // Mixing handles in one op is a typed error.
    let l = Layout::contiguous(&[1000]);
    let e = x.binary(BinaryOp::Add, &y, &l, &l).unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    // Memory: freed blocks stay cached until empty_cache (on the second handle, which no
    // test running beside this one touches).
    drop((x, y));
    other.synchronize().unwrap();
    let before = other.memory_stats();
    assert!(before.cached_bytes > 0, "{before:?}");
    other.empty_cache().unwrap();
    let after = other.memory_stats();
    assert_eq!(
        (after.cached_bytes, after.in_use_bytes),
        (0, 0),
        "{before:?} -> {after:?}"
    );
    for m in [
        "new",
        "location",
        "same_device",
        "set_seed",
        "get_current_seed",
        "synchronize",
    ] {
        for dt in ALL {
            t.mark(m, dt, Cell::Ok);
        }
    }
    t.finish("device methods");
}

#[test]
fn mismatched_operands_are_typed_errors() {
    let d = device();
    let a = d.zeros(12, DType::F32).unwrap();
    let b = d.zeros(12, DType::F16).unwrap();
    let l = Layout::contiguous(&[3, 4]);
    let e = a.binary(BinaryOp::Mul, &b, &l, &l).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "mul", .. }), "{e}");
    let e = a
        .matmul(&b, (1, 3, 3, 4), &l, &Layout::contiguous(&[4, 3]))
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "matmul", .. }),
        "{e}"
    );
    let mut c = d.zeros(12, DType::U8).unwrap();
    let e = c.const_set(Scalar::F32(1.0), &l).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "const_set",
                ..
            }
        ),
        "{e}"
    );
    let e = d.rand_uniform(4, DType::U32, 0.0, 1.0).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    let e = d.storage_from_bytes(DType::F32, &[0u8; 7]).unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
    // A reduction over a dim that does not exist.
    let e = a.reduce_op(ReduceOp::Sum, &l, &[2]).unwrap_err();
    println!("reduce over dim 2 of a rank-2 tensor: {e}");
}
