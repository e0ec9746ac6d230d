//! What the GPU tests of the collectives share: host references of every collective for
//! `size` ranks, computed with Candle's CPU backend from each rank's input.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use candle_core::Tensor;
use rocm_ccl::{Comm, ReduceOp};
use rocm_device::{DType, Device, Layout, Operand};
use rocm_test_support as ts;

/// The dtypes the libraries reduce, and those that only move (as bytes).
pub const REDUCED: [DType; 8] = [
    DType::U8,
    DType::U32,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];
pub const MOVED_ONLY: [DType; 2] = [DType::I16, DType::F8E4M3];

/// Rank `rank`'s input of case `case`: `n` random elements.
pub fn input(dtype: DType, n: usize, case: u64, rank: usize) -> Vec<u8> {
    ts::random(dtype, n, -4.0, 4.0, case * 1009 + rank as u64)
}

fn cpu(bytes: &[u8], dtype: DType) -> Tensor {
    let n = bytes.len() / dtype.size_in_bytes();
    ts::tensor(bytes, dtype, &[n])
}

/// op over the ranks' inputs, elementwise, as the dtype computes it.
pub fn reduced(inputs: &[Vec<u8>], dtype: DType, op: ReduceOp) -> Vec<u8> {
    let mut acc = cpu(&inputs[0], dtype);
    for x in &inputs[1..] {
        let x = cpu(x, dtype);
        acc = match op {
            ReduceOp::Sum | ReduceOp::Avg => (acc + x).unwrap(),
            ReduceOp::Prod => (acc * x).unwrap(),
            ReduceOp::Max => acc.maximum(&x).unwrap(),
            ReduceOp::Min => acc.minimum(&x).unwrap(),
        };
    }
    if op == ReduceOp::Avg {
        acc = (acc / inputs.len() as f64).unwrap();
    }
    ts::bytes_of(&acc)
}

pub fn concat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// A contiguous operand over a whole buffer.
pub struct Held {
    pub buf: rocm_device::Buffer,
    pub layout: Layout,
    pub dtype: DType,
}

impl Held {
    pub fn upload(d: &Device, bytes: &[u8], dtype: DType) -> Held {
        let n = bytes.len() / dtype.size_in_bytes();
        let buf = d.alloc(bytes.len()).unwrap();
        d.copy_htod(bytes, &buf, 0).unwrap();
        Held {
            buf,
            layout: Layout::contiguous(&[n]),
            dtype,
        }
    }

    /// `n` elements poisoned with 0x5a bytes (a result that is not written shows).
    pub fn poisoned(d: &Device, n: usize, dtype: DType) -> Held {
        let bytes = n * dtype.size_in_bytes();
        let buf = d.alloc(bytes).unwrap();
        d.memset(&buf, 0, bytes, 0x5a).unwrap();
        Held {
            buf,
            layout: Layout::contiguous(&[n]),
            dtype,
        }
    }

    pub fn op(&self) -> Operand<'_> {
        Operand::new(&self.buf, self.dtype, &self.layout)
    }

    pub fn bytes(&self, d: &Device) -> Vec<u8> {
        let mut out = vec![0u8; self.buf.len()];
        d.copy_dtoh(&self.buf, 0, &mut out).unwrap();
        out
    }
}

/// Slack on float comparisons: sums over `size` ranks round up to size - 1 times.
pub fn slack(size: usize, op: ReduceOp) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => (2 * size) as f64,
        _ => 2.0,
    }
}

/// Every collective of `comm` on `n` elements of `dtype` (case `case`), each checked against
/// the host reference; returns the number of checks.
pub fn check_all_collectives(comm: &Comm, dtype: DType, n: usize, case: u64) -> usize {
    let d = comm.device().clone();
    let (rank, size) = (comm.rank(), comm.size());
    let inputs: Vec<Vec<u8>> = (0..size).map(|r| input(dtype, n, case, r)).collect();
    let mine = Held::upload(&d, &inputs[rank], dtype);
    let what = |c: &str| format!("{c} {dtype} n={n} rank {rank} of {size}");
    let mut checks = 0;
    let reducible = REDUCED.contains(&dtype);
    if reducible {
        for op in ReduceOp::ALL {
            if op == ReduceOp::Avg && !dtype.is_float() {
                continue;
            }
            let want = reduced(&inputs, dtype, op);
            let out = Held::poisoned(&d, n, dtype);
            comm.all_reduce(mine.op(), out.op(), op).unwrap();
            comm.wait().unwrap();
            ts::compare(&out.bytes(&d), &want, dtype, slack(size, op))
                .unwrap_or_else(|e| panic!("{} {op:?}: {e}", what("all_reduce")));
            // in place
            let inplace = Held::upload(&d, &inputs[rank], dtype);
            comm.all_reduce(inplace.op(), inplace.op(), op).unwrap();
            comm.wait().unwrap();
            ts::compare(&inplace.bytes(&d), &want, dtype, slack(size, op))
                .unwrap_or_else(|e| panic!("{} {op:?} in place: {e}", what("all_reduce")));
            checks += 2;
        }
        // reduce and reduce_scatter over every op the dtype takes
        let root = size - 1;
        let all: Vec<Vec<u8>> = (0..size)
            .map(|r| input(dtype, n * size, case + 7, r))
            .collect();
        let src = Held::upload(&d, &all[rank], dtype);
        let width = n * dtype.size_in_bytes();
        for op in ReduceOp::ALL {
            if op == ReduceOp::Avg && !dtype.is_float() {
                continue;
            }
            let out = Held::poisoned(&d, n, dtype);
            comm.reduce(mine.op(), out.op(), op, root).unwrap();
            comm.wait().unwrap();
            if rank == root {
                ts::compare(
                    &out.bytes(&d),
                    &reduced(&inputs, dtype, op),
                    dtype,
                    slack(size, op),
                )
                .unwrap_or_else(|e| panic!("{} {op:?}: {e}", what("reduce")));
                checks += 1;
            }
            // each rank gets its block of the op over size blocks
            let out = Held::poisoned(&d, n, dtype);
            comm.reduce_scatter(src.op(), out.op(), op).unwrap();
            comm.wait().unwrap();
            let whole = reduced(&all, dtype, op);
            ts::compare(
                &out.bytes(&d),
                &whole[rank * width..(rank + 1) * width],
                dtype,
                slack(size, op),
            )
            .unwrap_or_else(|e| panic!("{} {op:?}: {e}", what("reduce_scatter")));
            checks += 1;
        }
    }
    // data movement: bit for bit
    let out = Held::poisoned(&d, n * size, dtype);
    comm.all_gather(mine.op(), out.op()).unwrap();
    comm.wait().unwrap();
    assert!(out.bytes(&d) == concat(&inputs), "{}", what("all_gather"));
    let root = size / 2;
    let out = Held::poisoned(&d, n, dtype);
    comm.broadcast(mine.op(), out.op(), root).unwrap();
    comm.wait().unwrap();
    assert!(out.bytes(&d) == inputs[root], "{}", what("broadcast"));
    checks += 2;
    // all_to_all: uneven blocks are refused before anything is queued; the largest even
    // prefix moves
    let out = Held::poisoned(&d, n, dtype);
    if n % size != 0 {
        let e = comm.all_to_all(mine.op(), out.op()).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("divisible by {size} ranks")),
            "{}: {e}",
            what("uneven all_to_all")
        );
        checks += 1;
    }
    let even = n / size * size;
    if even > 0 {
        let prefix = Layout::contiguous(&[even]);
        comm.all_to_all(
            Operand::new(&mine.buf, dtype, &prefix),
            Operand::new(&out.buf, dtype, &prefix),
        )
        .unwrap();
        comm.wait().unwrap();
        let block = even / size * dtype.size_in_bytes();
        let want: Vec<u8> = (0..size)
            .flat_map(|r| inputs[r][rank * block..(rank + 1) * block].to_vec())
            .collect();
        assert!(
            out.bytes(&d)[..even * dtype.size_in_bytes()] == want[..],
            "{}",
            what("all_to_all")
        );
        checks += 1;
    }
    // send/recv around a ring, grouped so that every rank sends and receives at once
    let out = Held::poisoned(&d, n, dtype);
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    comm.group(|| {
        comm.send(mine.op(), next)?;
        comm.recv(out.op(), prev)
    })
    .unwrap();
    comm.wait().unwrap();
    assert!(out.bytes(&d) == inputs[prev], "{}", what("send/recv ring"));
    checks + 1
}
