//! Multi-GPU tests of the collectives: one rank a device, every device of the machine (at
//! least two), ranks on threads joined through the TCP rendezvous. Every collective x reduce
//! op x dtype and sizes from 1 element to 256 MiB against the host reference (uneven
//! all-to-all blocks a typed error); a rank that stops calling, or whose process is killed,
//! makes the others' collective end in an error (the watchdog aborts) instead of a hang.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{check_all_collectives, Held, MOVED_ONLY, REDUCED};
use rocm_ccl::{Comm, Error, ReduceOp, Rendezvous};
use rocm_device::{DType, Device};

fn ranks() -> usize {
    let n = rocm_device::selected_platform()
        .and_then(|p| p.device_count())
        .expect("devices of the selected platform");
    assert!(
        n >= 2,
        "the multi-GPU tests need at least two devices, found {n}"
    );
    n
}

/// Runs `f(comm)` on every rank, one thread a device, and returns their results in rank
/// order; `port` separates the tests' rendezvous.
fn on_every_rank<T: Send>(port: u16, timeout: Duration, f: impl Fn(Comm) -> T + Sync) -> Vec<T> {
    let size = ranks();
    let rendezvous = Rendezvous::Tcp(format!("127.0.0.1:{port}"));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let (f, rendezvous) = (&f, rendezvous.clone());
                s.spawn(move || {
                    let device = Device::new(rank).unwrap();
                    let id = rendezvous
                        .exchange(rank, size, Duration::from_secs(60), || {
                            rocm_ccl::unique_id(&device)
                        })
                        .unwrap();
                    f(Comm::init(&device, &id, rank, size, timeout).unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_collective_dtype_and_size_on_every_rank() {
    let checks = on_every_rank(29611, Duration::from_secs(120), |comm| {
        let mut checks = 0;
        for (case, dtype) in REDUCED.iter().chain(&MOVED_ONLY).enumerate() {
            for n in [
                1usize,
                3,
                4097,
                65_536 * comm.size() + 1,
                (1 << 20) * comm.size(),
            ] {
                checks += check_all_collectives(&comm, *dtype, n, case as u64);
            }
        }
        checks
    });
    println!("{} ranks: {checks:?} checks", checks.len());
}

#[test]
fn all_reduce_and_all_gather_of_256_mib() {
    on_every_rank(29612, Duration::from_secs(120), |comm| {
        let d = comm.device().clone();
        let n = (256 << 20) / 4;
        let size = comm.size();
        // rank r holds r + 1 + i % 7: the sum is known without the others' data
        let mine: Vec<f32> = (0..n)
            .map(|i| (comm.rank() + 1) as f32 + (i % 7) as f32)
            .collect();
        let x = Held::upload(&d, bytemuck::cast_slice(&mine), DType::F32);
        comm.all_reduce(x.op(), x.op(), ReduceOp::Sum).unwrap();
        comm.wait().unwrap();
        let got = x.bytes(&d);
        let got: &[f32] = bytemuck::cast_slice(&got);
        let base = (size * (size + 1) / 2) as f32;
        let bad = (0..n).find(|&i| got[i] != base + (size * (i % 7)) as f32);
        assert_eq!(bad, None, "rank {}", comm.rank());
        let part = Held::upload(&d, &vec![comm.rank() as u8 + 1; 256 << 20], DType::U8);
        let all = Held::poisoned(&d, (256 << 20) * size, DType::U8);
        comm.all_gather(part.op(), all.op()).unwrap();
        comm.wait().unwrap();
        let got = all.bytes(&d);
        for r in 0..size {
            let block = &got[r * (256 << 20)..(r + 1) * (256 << 20)];
            assert!(
                block.iter().all(|&b| b == r as u8 + 1),
                "block {r} on rank {}",
                comm.rank()
            );
        }
    });
}

/// The last rank never joins the collective the others started: theirs must end in an error
/// within the timeout, not hang; the silent rank then gives up too.
#[test]
fn a_rank_that_stops_calling_makes_the_others_fail_instead_of_hang() {
    let started = std::time::Instant::now();
    let results = on_every_rank(29613, Duration::from_secs(3), |comm| {
        let d = comm.device().clone();
        let x = Held::poisoned(&d, 1 << 20, DType::F32);
        // one collective that every rank completes
        comm.all_reduce(x.op(), x.op(), ReduceOp::Max).unwrap();
        comm.wait().unwrap();
        if comm.rank() == comm.size() - 1 {
            std::thread::sleep(Duration::from_secs(6));
            comm.abort("the silent rank leaves");
            return Ok(());
        }
        comm.all_reduce(x.op(), x.op(), ReduceOp::Sum).unwrap();
        let waited = comm.wait();
        // every later call is refused
        let again = comm.all_reduce(x.op(), x.op(), ReduceOp::Sum);
        assert!(matches!(again, Err(Error::Aborted { .. })), "{again:?}");
        waited
    });
    let elapsed = started.elapsed();
    for (rank, r) in results.iter().enumerate().take(results.len() - 1) {
        let e = r
            .as_ref()
            .expect_err("the collective with a silent peer fails");
        assert!(e.to_string().contains("no progress"), "rank {rank}: {e}");
    }
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

/// Set in the processes [`a_killed_rank_makes_the_others_fail_instead_of_hang`] starts: the
/// rank they play.
const CHILD_RANK: &str = "ROCM_CCL_TEST_CHILD_RANK";
const KILLED_PORT: u16 = 29614;

/// A rank of the killed-process test: one all-reduce every rank completes, then the second,
/// which the killed rank never joins. Returns the second's result.
fn killed_test_rank(rank: usize, size: usize) -> Result<(), Error> {
    let device = Device::new(rank).unwrap();
    let id = Rendezvous::Tcp(format!("127.0.0.1:{KILLED_PORT}"))
        .exchange(rank, size, Duration::from_secs(60), || {
            rocm_ccl::unique_id(&device)
        })
        .unwrap();
    let comm = Comm::init(&device, &id, rank, size, Duration::from_secs(3)).unwrap();
    let x = Held::poisoned(&device, 1 << 20, DType::F32);
    comm.all_reduce(x.op(), x.op(), ReduceOp::Max).unwrap();
    comm.wait().unwrap();
    if rank == size - 1 {
        // the parent kills this process now; it never gets past this
        println!("ready to be killed");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    comm.all_reduce(x.op(), x.op(), ReduceOp::Sum).unwrap();
    comm.wait()
}

/// Rank 0 runs here, every other rank in a process of its own (this test binary again, with
/// [`CHILD_RANK`] set); the last rank's process is killed (SIGKILL) after the first
/// collective. The others' next collective must end in an error within the timeout.
#[test]
fn a_killed_rank_makes_the_others_fail_instead_of_hang() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    if let Ok(rank) = std::env::var(CHILD_RANK) {
        let rank: usize = rank.parse().unwrap();
        let e = killed_test_rank(rank, ranks()).expect_err("the killed peer's collective fails");
        assert!(e.to_string().contains("no progress"), "rank {rank}: {e}");
        println!("rank {rank} failed as it should: {e}");
        return;
    }
    let size = ranks();
    let started = std::time::Instant::now();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (1..size)
        .map(|rank| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "a_killed_rank_makes_the_others_fail_instead_of_hang",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_RANK, rank.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // the victim says when its first collective is done; then it dies (Child::kill is
    // SIGKILL: no handler, no clean-up in the victim)
    let mut victim = children.pop().unwrap();
    let killer = std::thread::spawn(move || {
        let out = victim.stdout.take().unwrap();
        let ready = std::io::BufReader::new(out)
            .lines()
            .map_while(|l| l.ok())
            .any(|l| l.contains("ready to be killed"));
        let killed = victim.kill().is_ok();
        (ready, killed, victim)
    });
    let mine = killed_test_rank(0, size);
    let (ready, killed, mut victim) = killer.join().unwrap();
    assert!(
        ready && killed,
        "the victim reached its first collective and was killed"
    );
    let e = mine.expect_err("rank 0's collective with a killed peer fails");
    assert!(e.to_string().contains("no progress"), "rank 0: {e}");
    for (i, mut c) in children.into_iter().enumerate() {
        assert!(
            c.wait().unwrap().success(),
            "rank {} failed as it should not",
            i + 1
        );
    }
    assert!(
        !victim.wait().unwrap().success(),
        "the killed rank's process"
    );
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "took {:?}",
        started.elapsed()
    );
}
