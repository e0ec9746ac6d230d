//! GPU tests of the collectives on one device: a communicator of one rank runs every
//! collective x reduce op x dtype through the library (its one-rank kernels and our bindings,
//! argument order and enum values included; the one-rank Avg workaround aside), a captured
//! graph replays a collective, and bad input is a typed error. The multi-GPU suite is
//! `tests/multi_gpu.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{check_all_collectives, Held, MOVED_ONLY, REDUCED};
use rocm_ccl::{Comm, Error, ReduceOp};
use rocm_device::{DType, Device, Layout, Operand};

fn single() -> Comm {
    let d = rocm_test_support::device();
    let lib = rocm_ccl::CclLib::get(d.info().platform).expect("the collective library loads");
    println!("{lib:?}, version {}", lib.version().unwrap());
    let id = rocm_ccl::unique_id(&d).unwrap();
    Comm::init(&d, &id, 0, 1, Duration::from_secs(60)).unwrap()
}

#[test]
fn every_collective_and_dtype_on_one_rank() {
    let comm = single();
    let mut checks = 0;
    for (case, dtype) in REDUCED.iter().chain(&MOVED_ONLY).enumerate() {
        for n in [1usize, 7, 4097, (1 << 20) + 3] {
            checks += check_all_collectives(&comm, *dtype, n, case as u64);
        }
    }
    println!("{checks} checks");
}

/// The one-rank Avg workaround (`Comm::one_rank_avg`): the average over one rank is the input,
/// bit for bit, at counts off the library's block multiples, in and out of place.
#[test]
fn one_rank_avg_is_the_input() {
    let comm = single();
    let d = comm.device().clone();
    for dtype in [DType::F32, DType::BF16, DType::F64] {
        for n in [7usize, 4097, (1 << 20) + 3] {
            let x = common::input(dtype, n, 11, 0);
            let src = Held::upload(&d, &x, dtype);
            let out = Held::poisoned(&d, n, dtype);
            comm.all_reduce(src.op(), out.op(), ReduceOp::Avg).unwrap();
            comm.reduce_scatter(src.op(), src.op(), ReduceOp::Avg)
                .unwrap();
            comm.wait().unwrap();
            assert!(out.bytes(&d) == x, "{dtype} n={n} out of place");
            assert!(src.bytes(&d) == x, "{dtype} n={n} in place");
        }
    }
}

/// A graph captured around collectives replays them through the library: each replay's
/// result is the op of that replay's input.
#[test]
fn a_captured_all_reduce_replays_with_the_librarys_result() {
    let comm = single();
    let d = comm.device().clone();
    let n = 4097;
    let src = Held::poisoned(&d, n, DType::F32);
    let out = Held::poisoned(&d, n, DType::F32);
    let gathered = Held::poisoned(&d, n, DType::F32);
    let record = || -> Result<(), Error> {
        comm.all_reduce(src.op(), out.op(), ReduceOp::Sum)?;
        comm.all_reduce(out.op(), out.op(), ReduceOp::Max)?;
        comm.all_gather(out.op(), gathered.op())
    };
    // once eagerly, so that the library has set up its one-rank paths before the capture
    record().unwrap();
    comm.wait().unwrap();
    let (graph, ()) = d.capture(record).unwrap();
    for case in 0..3u64 {
        let x = common::input(DType::F32, n, 100 + case, 0);
        d.copy_htod(&x, &src.buf, 0).unwrap();
        d.memset(&out.buf, 0, n * 4, 0x5a).unwrap();
        d.memset(&gathered.buf, 0, n * 4, 0x5a).unwrap();
        graph.replay().unwrap();
        d.synchronize().unwrap();
        assert!(out.bytes(&d) == x, "replay {case}: all_reduce");
        assert!(gathered.bytes(&d) == x, "replay {case}: all_gather");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let comm = single();
    let d = comm.device().clone();
    let f = Held::poisoned(&d, 8, DType::F32);
    let h = Held::poisoned(&d, 8, DType::F16);
    let short = Held::poisoned(&d, 7, DType::F32);
    let i16s = Held::poisoned(&d, 8, DType::I16);
    let u32s = Held::poisoned(&d, 8, DType::U32);
    let expect = |r: Result<(), Error>, needle: &str| {
        let e = r.expect_err(needle).to_string();
        assert!(e.contains(needle), "{e} (wanted {needle:?})");
    };
    expect(
        comm.all_reduce(f.op(), h.op(), ReduceOp::Sum),
        "dtype mismatch",
    );
    expect(
        comm.all_reduce(f.op(), short.op(), ReduceOp::Sum),
        "receive 7",
    );
    expect(comm.all_gather(f.op(), short.op()), "must be 1 ranks x 8");
    expect(
        comm.reduce_scatter(f.op(), short.op(), ReduceOp::Sum),
        "send 8 elements",
    );
    expect(
        comm.all_reduce(i16s.op(), i16s.op(), ReduceOp::Sum),
        "i16 is not supported",
    );
    expect(
        comm.all_reduce(u32s.op(), u32s.op(), ReduceOp::Avg),
        "floating-point dtypes only",
    );
    expect(comm.broadcast(f.op(), f.op(), 1), "root 1 of 1");
    expect(comm.send(f.op(), 3), "peer 3 of 1");
    // a strided view
    let strided = Layout::new(&[4], &[2], 0);
    let view = Operand::new(&f.buf, DType::F32, &strided);
    expect(comm.all_reduce(view, view, ReduceOp::Sum), "not contiguous");
    // past the buffer's end
    let far = Layout::contiguous_at(&[8], 4);
    let over = Operand::new(&f.buf, DType::F32, &far);
    expect(
        comm.all_reduce(over, over, ReduceOp::Sum),
        "reaches byte 48",
    );
    // a buffer of another device handle
    let other = Device::with_config(0, rocm_device::Config::global().unwrap().clone()).unwrap();
    let elsewhere = Held::poisoned(&other, 8, DType::F32);
    expect(
        comm.all_reduce(elsewhere.op(), f.op(), ReduceOp::Sum),
        "different devices",
    );
    // moved-only dtypes still move
    comm.all_gather(i16s.op(), i16s.op()).unwrap();
    comm.wait().unwrap();
}

#[test]
fn an_aborted_communicator_refuses_every_call() {
    let comm = single();
    let d = comm.device().clone();
    let x = Held::poisoned(&d, 8, DType::F32);
    comm.all_reduce(x.op(), x.op(), ReduceOp::Sum).unwrap();
    comm.wait().unwrap();
    comm.abort("test");
    assert!(comm.is_aborted());
    let e = comm.all_reduce(x.op(), x.op(), ReduceOp::Sum).unwrap_err();
    assert!(
        matches!(e, Error::Aborted { .. }) && e.to_string().contains("test"),
        "{e}"
    );
    assert!(matches!(comm.wait().unwrap_err(), Error::Aborted { .. }));
    // the device itself carries on
    assert_eq!(x.bytes(&d).len(), 32);
}
