//! GPU tests of the runtime: run on a real device through whichever platform is selected
//! (`bash .gpu/run.sh` runs them on the lent NVIDIA GPU through the nvidia platform).
//!
//! One file, one test binary: each GPU test binary travels in the GPU pack and runs in each of
//! its modes, so a crate's GPU suite stays one target (the pack's size and link time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rocm_device::{Config, Device, DeviceRepr, Error, KernelLayout, LaunchArgs, LaunchConfig};
use rocm_kernels as kernels;

fn device() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| Device::new(0).expect("a GPU (set CANDLE_ROCM_PLATFORM)"))
        .clone()
}

/// A grid-stride launch over `n` items that must succeed.
fn launch_1d(d: &Device, f: &rocm_device::Function, n: u64, args: &mut LaunchArgs) {
    d.launch(f, LaunchConfig::for_elements(n, d.info()), args)
        .unwrap_or_else(|e| panic!("{f:?}: {e}"));
}

fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

#[test]
fn device_reports_its_properties() {
    let d = device();
    let i = d.info();
    println!("{i:?}");
    assert!(!i.name.is_empty() && !i.arch.is_empty());
    assert!(i.warp_size == 32 || i.warp_size == 64);
    assert!(i.multiprocessor_count > 0 && i.shared_mem_per_block >= 16 * 1024);
    let (free, total) = d.memory_info().unwrap();
    assert!(
        free <= total && total == i.total_memory,
        "{free} {total} {}",
        i.total_memory
    );
}

#[test]
fn round_trips_of_many_sizes() {
    let d = device();
    let mut r = rng(1);
    for n in [0usize, 1, 3, 4097, 1 << 20, 1 << 30] {
        let host: Vec<u8> = (0..n).map(|_| r.random()).collect();
        let buf = d.htod(&host).unwrap();
        assert_eq!(buf.len(), n);
        // device to device, then back
        let copy = d.alloc_typed::<u8>(n).unwrap();
        d.copy_dtod(buf.as_buffer(), 0, copy.as_buffer(), 0, n)
            .unwrap();
        let back = d.dtoh(&copy).unwrap();
        assert!(back == host, "round trip of {n} bytes differs");
    }
    // Offsets inside buffers and typed elements.
    let xs: Vec<f32> = (0..1000).map(|_| r.random()).collect();
    let buf = d.htod(&xs).unwrap();
    let mut part = vec![0u8; 40];
    d.copy_dtoh(buf.as_buffer(), 400, &mut part).unwrap();
    assert_eq!(part, bytemuck::cast_slice::<f32, u8>(&xs[100..110]));
    let zeros = d.alloc_zeroed_typed::<i64>(777).unwrap();
    assert!(d.dtoh(&zeros).unwrap().iter().all(|&v| v == 0));
    let poisoned = d.alloc_typed::<u8>(64).unwrap();
    d.memset(poisoned.as_buffer(), 8, 16, 0xab).unwrap();
    let got = d.dtoh(&poisoned).unwrap();
    assert!(got[8..24].iter().all(|&b| b == 0xab));
}

#[test]
fn staged_uploads_land_whole_and_in_stream_order() {
    let d = device();
    let mut r = rng(2);
    // below the staged size, one chunk, chunks and a partial one, more chunks than buffers
    for n in [(1 << 20) - 1, 1 << 20, (8 << 20) + 3, (20 << 20) + 5] {
        let mut host: Vec<u8> = (0..n).map(|_| r.random()).collect();
        let buf = d.alloc_typed::<u8>(n + 7).unwrap();
        d.memset(buf.as_buffer(), 0, 7, 0x5a).unwrap();
        d.copy_htod(&host, buf.as_buffer(), 7).unwrap();
        // the source may be reused at once: the staging holds its bytes
        let want = host.clone();
        host.fill(0);
        let host = want;
        // a device copy queued behind the upload sees all of it
        let copy = d.alloc_typed::<u8>(n).unwrap();
        d.copy_dtod(buf.as_buffer(), 7, copy.as_buffer(), 0, n)
            .unwrap();
        let back = d.dtoh(&copy).unwrap();
        assert!(back == host, "staged upload of {n} bytes differs");
        let mut head = [0u8; 7];
        d.copy_dtoh(buf.as_buffer(), 0, &mut head).unwrap();
        assert_eq!(
            head, [0x5a; 7],
            "the upload of {n} bytes wrote before its offset"
        );
    }
    // bytes made piece by piece: every offset is asked for once, in order
    let n = (17 << 20) + 11;
    let buf = d.alloc_typed::<u8>(n).unwrap();
    let mut asked = 0usize;
    d.copy_htod_with(buf.as_buffer(), 0, n, &mut |at, out| {
        assert_eq!(at, asked, "pieces out of order");
        for (i, b) in out.iter_mut().enumerate() {
            *b = ((at + i) % 251) as u8;
        }
        asked += out.len();
        Ok(())
    })
    .unwrap();
    assert_eq!(asked, n);
    let back = d.dtoh(&buf).unwrap();
    assert!(back.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    // a fill that fails stops the upload with its error; the device goes on
    let err = d
        .copy_htod_with(buf.as_buffer(), 0, n, &mut |at, _| {
            if at > 0 {
                Err(Error::SizeMismatch {
                    op: "test fill",
                    detail: "stops here".into(),
                })
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert!(err.to_string().contains("stops here"), "{err}");
    // past the end of the buffer: refused before any byte moves
    assert!(d
        .copy_htod_with(buf.as_buffer(), 1, n, &mut |_, _| Ok(()))
        .is_err());
    d.synchronize().unwrap();
}

#[test]
fn copies_out_of_bounds_are_typed_errors() {
    let d = device();
    let buf = d.alloc(100).unwrap();
    let err = d.copy_htod(&[0u8; 10], &buf, 95).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SizeMismatch {
                op: "copy_htod",
                ..
            }
        ),
        "{err}"
    );
    let mut out = [0u8; 8];
    assert!(d.copy_dtoh(&buf, usize::MAX, &mut out).is_err());
    assert!(d.memset(&buf, 50, 51, 0).is_err());
}

/// Bit patterns to fill with, per dtype, and random values for iota/copy.
trait TestValue: DeviceRepr + PartialEq + std::fmt::Debug {
    const NAME: &'static str;
    fn sample(r: &mut rand::rngs::StdRng) -> Self;
    /// start + i * step, as the kernel computes it.
    fn iota(start: Self, step: Self, i: u64) -> Self;
    fn small(v: i8) -> Self;
}

macro_rules! int_value {
    ($t:ty, $name:literal) => {
        impl TestValue for $t {
            const NAME: &'static str = $name;
            fn sample(r: &mut rand::rngs::StdRng) -> Self {
                r.random()
            }
            fn iota(start: Self, step: Self, i: u64) -> Self {
                start.wrapping_add((i as $t).wrapping_mul(step))
            }
            fn small(v: i8) -> Self {
                v as $t
            }
        }
    };
}
int_value!(u8, "u8");
int_value!(u32, "u32");
int_value!(i16, "i16");
int_value!(i32, "i32");
int_value!(i64, "i64");

macro_rules! float_value {
    ($t:ty, $name:literal, $from:expr, $to:expr) => {
        impl TestValue for $t {
            const NAME: &'static str = $name;
            fn sample(r: &mut rand::rngs::StdRng) -> Self {
                $from(r.random_range(-100.0f32..100.0))
            }
            fn iota(start: Self, step: Self, i: u64) -> Self {
                // The kernel computes in f32 for the narrow types, in T otherwise.
                $from($to(start) + i as f32 * $to(step))
            }
            fn small(v: i8) -> Self {
                $from(v as f32)
            }
        }
    };
}
float_value!(f32, "f32", |x: f32| x, |x: f32| x);
float_value!(f16, "f16", f16::from_f32, f16::to_f32);
float_value!(bf16, "bf16", bf16::from_f32, bf16::to_f32);

impl TestValue for f64 {
    const NAME: &'static str = "f64";
    fn sample(r: &mut rand::rngs::StdRng) -> Self {
        r.random_range(-100.0..100.0)
    }
    fn iota(start: Self, step: Self, i: u64) -> Self {
        start + i as f64 * step
    }
    fn small(v: i8) -> Self {
        v as f64
    }
}

const SIZES: [usize; 6] = [1, 3, 255, 4097, 65_537, 1_000_003];

fn check_fill_iota_copy<T: TestValue>(seed: u64) {
    let d = device();
    let mut r = rng(seed);
    let module = &kernels::FILL;
    for n in SIZES {
        // fill, into a poisoned buffer, also at an unaligned start (no 16-byte fast path)
        for offset_elems in [0usize, 1] {
            let total = n + offset_elems;
            let buf = d.alloc_typed::<T>(total).unwrap();
            d.memset(buf.as_buffer(), 0, total * size_of::<T>(), 0x5a)
                .unwrap();
            let value = T::sample(&mut r);
            let f = d.kernel(module, "fill", T::NAME).unwrap();
            let mut args = LaunchArgs::new();
            args.push_buffer_at(buf.as_buffer(), offset_elems * size_of::<T>())
                .unwrap()
                .push(value)
                .push(n as u64);
            launch_1d(&d, &f, n as u64, &mut args);
            let got = d.dtoh(&buf).unwrap();
            let poison: T = bytemuck::cast_slice::<u8, T>(&vec![0x5a; size_of::<T>()])[0];
            assert!(
                got[..offset_elems].iter().all(|&v| v == poison),
                "fill_{} wrote before its start",
                T::NAME
            );
            let bad = got[offset_elems..].iter().position(|&v| v != value);
            assert_eq!(bad, None, "fill_{} n={n} offset={offset_elems}", T::NAME);
        }
        // iota
        let (start, step) = (T::small(3), T::small(-2));
        let out = d.alloc_typed::<T>(n).unwrap();
        let f = d.kernel(module, "iota", T::NAME).unwrap();
        let mut args = LaunchArgs::new();
        args.push_buffer(out.as_buffer())
            .push(start)
            .push(step)
            .push(n as u64);
        launch_1d(&d, &f, n as u64, &mut args);
        let got = d.dtoh(&out).unwrap();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(
                *v,
                T::iota(start, step, i as u64),
                "iota_{} at {i}",
                T::NAME
            );
        }
        // contiguous copy of random data
        let host: Vec<T> = (0..n).map(|_| T::sample(&mut r)).collect();
        let src = d.htod(&host).unwrap();
        let dst = d.alloc_typed::<T>(n).unwrap();
        let f = d.kernel(module, "copy", T::NAME).unwrap();
        let mut args = LaunchArgs::new();
        args.push_buffer(src.as_buffer())
            .push_buffer(dst.as_buffer())
            .push(n as u64);
        launch_1d(&d, &f, n as u64, &mut args);
        assert!(d.dtoh(&dst).unwrap() == host, "copy_{} n={n}", T::NAME);
    }
    // strided copy: a transposed, offset view of a 3-d tensor
    let dims = [7usize, 33, 19];
    let strides = [1usize, 7 * 19, 7]; // element (a,b,c) at a + b*133 + c*7
    let start = 5;
    let len = start + 7 * 33 * 19;
    let host: Vec<T> = (0..len).map(|_| T::sample(&mut r)).collect();
    let src = d.htod(&host).unwrap();
    let n = dims.iter().product::<usize>();
    let dst = d.alloc_typed::<T>(n).unwrap();
    let layout = KernelLayout::new(&dims, &strides, start).unwrap();
    let f = d.kernel(module, "copy_strided", T::NAME).unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(src.as_buffer())
        .push_buffer(dst.as_buffer())
        .push(n as u64)
        .push(layout);
    launch_1d(&d, &f, n as u64, &mut args);
    let got = d.dtoh(&dst).unwrap();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(
            *v,
            host[layout.offset(i as u64) as usize],
            "copy_strided_{} at {i}",
            T::NAME
        );
    }
}

#[test]
fn fill_iota_copy_every_dtype_match_the_host() {
    check_fill_iota_copy::<u8>(10);
    check_fill_iota_copy::<u32>(11);
    check_fill_iota_copy::<i16>(12);
    check_fill_iota_copy::<i32>(13);
    check_fill_iota_copy::<i64>(14);
    check_fill_iota_copy::<bf16>(15);
    check_fill_iota_copy::<f16>(16);
    check_fill_iota_copy::<f32>(17);
    check_fill_iota_copy::<f64>(18);
}

#[test]
fn f8e4m3_kernels_fill_and_convert_like_the_reference() {
    // The f8e4m3 entry points exist and compute: fill copies the byte, iota converts
    // start + i*step to f8 (round to nearest even, saturating at 448).
    let d = device();
    let n = 1000usize;
    let buf = d.alloc_typed::<u8>(n).unwrap();
    let f = d.kernel(&kernels::FILL, "fill", "f8e4m3").unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(buf.as_buffer())
        .push(0x3cu8)
        .push(n as u64);
    launch_1d(&d, &f, n as u64, &mut args);
    assert!(d.dtoh(&buf).unwrap().iter().all(|&b| b == 0x3c));
    // iota from 0.0 step 0.25 (0x00 and f8(0.25) = 0x28): exact for small i, then rounded.
    let f = d.kernel(&kernels::FILL, "iota", "f8e4m3").unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(buf.as_buffer())
        .push(0x00u8)
        .push(0x28u8)
        .push(n as u64);
    launch_1d(&d, &f, n as u64, &mut args);
    let got = d.dtoh(&buf).unwrap();
    for (i, &b) in got.iter().enumerate() {
        assert_eq!(b, f8e4m3_from_f32(i as f32 * 0.25), "f8 iota at {i}");
    }
}

/// Reference f32 -> f8e4m3 (OCP FN): round to nearest even, saturate to 448, via f64 search.
fn f8e4m3_from_f32(x: f32) -> u8 {
    let decode = |b: u8| -> f64 {
        let e = (b >> 3) & 0xf;
        let m = (b & 7) as f64;
        if e == 0 {
            m * 2f64.powi(-9)
        } else {
            (1.0 + m / 8.0) * 2f64.powi(e as i32 - 7)
        }
    };
    let x = x as f64;
    let mut best = 0u8;
    for b in 0u8..=0x7e {
        let (db, dbest) = ((decode(b) - x).abs(), (decode(best) - x).abs());
        if db < dbest || (db == dbest && b % 2 == 0 && best % 2 == 1) {
            best = b;
        }
    }
    best
}

#[test]
fn compat_atomics_and_shuffles_work_on_the_device() {
    // Narrow atomics (CAS on the enclosing word, at every byte/half-word position) and a
    // warp reduction through warp_shfl_xor over warpSize lanes.
    let d = device();
    let src = format!(
        "{}\n{}",
        kernels::prelude(),
        r#"
#define ACC(NAME, T) KERNEL void acc_##NAME(T* slots, u32 nslots, T one, u32 n) { \
    u32 i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomic_add(&slots[i % nslots], one); }
CANDLE_ROCM_FOR_EACH_DTYPE(ACC)
KERNEL void warp_sum(const float* x, float* out) {
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int m = warpSize / 2; m > 0; m /= 2) v += warp_shfl_xor(v, m);
    if (threadIdx.x % warpSize == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / warpSize] = v;
}
"#
    );
    let module = d.load_source("compat_selftest", &src).unwrap();
    let nslots = 37u32; // odd: slots start at every offset inside a 32-bit word
    let per_slot = 16u32; // exact in every dtype, f8e4m3 included
    let n = nslots * per_slot;
    fn run<T: DeviceRepr + PartialEq + std::fmt::Debug>(
        d: &Device,
        m: &std::sync::Arc<rocm_device::Module>,
        name: &str,
        one: T,
        expect: T,
        nslots: u32,
        n: u32,
    ) {
        let slots = d.alloc_zeroed_typed::<T>(nslots as usize).unwrap();
        let f = m.function(&format!("acc_{name}")).unwrap();
        let mut args = LaunchArgs::new();
        args.push_buffer(slots.as_buffer())
            .push(nslots)
            .push(one)
            .push(n);
        launch_1d(d, &f, n as u64, &mut args);
        let got = d.dtoh(&slots).unwrap();
        assert!(got.iter().all(|v| *v == expect), "acc_{name}: {got:?}");
    }
    run(&d, &module, "u8", 1u8, 16u8, nslots, n);
    run(&d, &module, "u32", 1u32, 16, nslots, n);
    run(&d, &module, "i16", -1i16, -16, nslots, n);
    run(&d, &module, "i32", -1i32, -16, nslots, n);
    run(&d, &module, "i64", -1i64, -16, nslots, n);
    run(&d, &module, "f32", 1f32, 16.0, nslots, n);
    run(&d, &module, "f64", 1f64, 16.0, nslots, n);
    run(&d, &module, "f16", f16::ONE, f16::from_f32(16.0), nslots, n);
    run(
        &d,
        &module,
        "bf16",
        bf16::ONE,
        bf16::from_f32(16.0),
        nslots,
        n,
    );
    run(&d, &module, "f8e4m3", 0x38u8, 0x58u8, nslots, n); // 1.0 -> 16.0

    let warp = d.info().warp_size as usize;
    let blocks = 64usize;
    let x: Vec<f32> = (0..blocks * 256).map(|i| (i % 97) as f32).collect();
    let xs = d.htod(&x).unwrap();
    let out = d.alloc_typed::<f32>(blocks * 256 / warp).unwrap();
    let f = module.function("warp_sum").unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(xs.as_buffer())
        .push_buffer(out.as_buffer());
    let cfg = LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    d.launch(&f, cfg, &mut args).unwrap();
    let got = d.dtoh(&out).unwrap();
    for (w, v) in got.iter().enumerate() {
        let want: f32 = x[w * warp..(w + 1) * warp].iter().sum();
        assert_eq!(*v, want, "warp {w}");
    }
}

#[test]
fn a_missing_function_names_itself_and_its_module() {
    let d = device();
    let err = d.kernel(&kernels::FILL, "fill", "q4k").unwrap_err();
    assert_eq!(
        err.to_string(),
        "module `fill` has no kernel `fill for q4k`"
    );
    let bad = d
        .load_source("broken_on_purpose", "KERNEL void k() { nope(); }")
        .unwrap_err();
    assert!(matches!(bad, Error::Compile { .. }), "{bad}");
}

#[test]
fn invalid_launches_are_refused_before_the_driver() {
    let d = device();
    let f = d.kernel(&kernels::FILL, "fill", "f32").unwrap();
    let buf = d.alloc_typed::<f32>(16).unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(buf.as_buffer()).push(1f32).push(16u64);
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [4096, 1, 1],
        shared_mem_bytes: 0,
    };
    let err = d.launch(&f, cfg, &mut args).unwrap_err();
    assert!(matches!(err, Error::InvalidLaunch { .. }), "{err}");
    // A buffer of another device handle is refused.
    let other = Device::with_platform(d.info().platform, 0).unwrap();
    let foreign = other.alloc_typed::<f32>(16).unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(foreign.as_buffer()).push(1f32).push(16u64);
    let err = d
        .launch(&f, LaunchConfig::for_elements(16, d.info()), &mut args)
        .unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { .. }), "{err}");
}

#[test]
fn out_of_memory_is_a_typed_error_and_the_device_stays_usable() {
    let d = device();
    let total = d.info().total_memory;
    let err = d.alloc(total * 2).unwrap_err();
    match &err {
        Error::OutOfMemory {
            requested,
            total: t,
            ..
        } => {
            assert!(*requested >= total * 2 && *t == total, "{err}");
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    println!("{err}");
    let ok = d.htod(&[1u32, 2, 3]).unwrap();
    assert_eq!(d.dtoh(&ok).unwrap(), vec![1, 2, 3]);
}

#[test]
fn the_pool_reuses_blocks_and_empty_cache_returns_them() {
    let d = Device::new(0).unwrap(); // its own pool
    for _ in 0..100 {
        let b = d.alloc(3 << 20).unwrap();
        drop(b);
    }
    let s = d.memory_stats();
    assert_eq!((s.misses, s.hits, s.driver_allocs), (1, 99, 1), "{s:?}");
    assert_eq!((s.in_use_bytes, s.cached_bytes), (0, 3 << 20));
    assert_eq!(d.empty_cache().unwrap(), 3 << 20);
    assert_eq!(d.memory_stats().cached_bytes, 0);
}

#[test]
fn eight_threads_allocate_launch_and_copy_concurrently() {
    let d = device();
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                let f = d.kernel(&kernels::FILL, "iota", "i32").unwrap();
                for round in 0..50u32 {
                    let n = 1000 + (t * 977 + round * 131) as usize % 50_000;
                    let out = d.alloc_typed::<i32>(n).unwrap();
                    let start = (t * 1000 + round) as i32;
                    let mut args = LaunchArgs::new();
                    args.push_buffer(out.as_buffer())
                        .push(start)
                        .push(1i32)
                        .push(n as u64);
                    launch_1d(&d, &f, n as u64, &mut args);
                    let got = d.dtoh(&out).unwrap();
                    assert!(
                        got.iter().enumerate().all(|(i, &v)| v == start + i as i32),
                        "thread {t} round {round}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker thread");
    }
}

#[test]
fn events_time_a_kernel() {
    let d = device();
    let n = 64usize << 20; // 256 MiB of f32
    let buf = d.alloc_typed::<f32>(n).unwrap();
    let f = d.kernel(&kernels::FILL, "fill", "f32").unwrap();
    let (start, end) = (d.create_event().unwrap(), d.create_event().unwrap());
    let mut args = LaunchArgs::new();
    args.push_buffer(buf.as_buffer())
        .push(2.5f32)
        .push(n as u64);
    let cfg = LaunchConfig::for_elements(n as u64 / 4, d.info());
    d.launch(&f, cfg, &mut args).unwrap(); // warm-up
    start.record(d.stream()).unwrap();
    for _ in 0..10 {
        d.launch(&f, cfg, &mut args).unwrap();
    }
    end.record(d.stream()).unwrap();
    end.synchronize().unwrap();
    let ms = start.elapsed_ms(&end).unwrap() / 10.0;
    let gbs = (n * 4) as f64 / (ms as f64 * 1e-3) / 1e9;
    println!("fill_f32 of 256 MiB: {ms:.3} ms, {gbs:.0} GB/s written");
    // Timing is reported, not asserted (a sanitizer slows kernels by orders of magnitude).
    assert!(ms > 0.0 && ms.is_finite(), "{ms} ms");
}

/// Run as a child process by `module_cache_misses_then_hits_in_a_second_process`.
#[test]
fn child_loads_the_fill_module() {
    // no background compiles (also when the suite runs this test itself)
    let config = Config {
        compile_threads: 0,
        ..Config::global().unwrap().clone()
    };
    let d = Device::with_config(0, config).unwrap();
    d.kernel(&kernels::FILL, "fill", "f32").unwrap();
    let s = d.compile_stats();
    println!(
        "CACHE-STATS compiled={} disk_hits={} compile_ms={:.1} disk_ms={:.2} load_ms={:.2}",
        s.compiled,
        s.disk_hits,
        s.compile_time.as_secs_f64() * 1e3,
        s.disk_load_time.as_secs_f64() * 1e3,
        s.module_load_time.as_secs_f64() * 1e3
    );
    assert_eq!(s.compiled + s.disk_hits, 1);
}

#[test]
fn module_cache_misses_then_hits_in_a_second_process() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_loads_the_fill_module",
                "--include-ignored",
                "--nocapture",
            ])
            .env("CANDLE_ROCM_CACHE_DIR", dir.path())
            // no background compiles: the child compiles exactly one module
            .env("CANDLE_ROCM_COMPILE_THREADS", "0")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("CACHE-STATS"))
            .expect("stats line")
            .to_string();
        println!("{line}");
        line
    };
    let first = run();
    assert!(first.contains("compiled=1 disk_hits=0"), "{first}");
    let second = run();
    assert!(second.contains("compiled=0 disk_hits=1"), "{second}");
    // A corrupt entry is recompiled, then healed.
    let entry = walk(dir.path())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "bin"))
        .unwrap();
    std::fs::write(&entry, b"garbage").unwrap();
    let third = run();
    assert!(third.contains("compiled=1 disk_hits=0"), "{third}");
    assert!(run().contains("compiled=0 disk_hits=1"));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A handle of its own with an empty kernel cache and `threads` compile threads.
fn fresh_device(dir: &std::path::Path, threads: usize) -> Device {
    let config = Config {
        kernel_cache_dir: Some(dir.to_path_buf()),
        compile_threads: threads,
        ..Config::global().unwrap().clone()
    };
    Device::with_config(0, config).unwrap()
}

/// The modules that have a one-key variant for `key`.
fn modules_of(key: &str) -> Vec<&'static rocm_kernels::KernelModule> {
    kernels::ALL_MODULES
        .iter()
        .copied()
        .filter(|m| m.filter_keys().contains(&key))
        .collect()
}

#[test]
fn prepare_compiles_and_loads_every_module_of_a_key_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = fresh_device(dir.path(), 4);
    let t = std::time::Instant::now();
    d.prepare_keys(kernels::ALL_MODULES, &["f32"]).unwrap();
    let wall = t.elapsed();
    let s = d.compile_stats();
    let want = modules_of("f32").len() as u64;
    println!(
        "prepare f32: {want} modules in {:.1} s wall, {:.1} s of compiling",
        wall.as_secs_f64(),
        s.compile_time.as_secs_f64()
    );
    assert_eq!(s.compiled, want);
    // prepared means loaded: kernels resolve with no further compile, and run
    d.kernel(&kernels::BINARY, "add", "f32").unwrap();
    let f = d.kernel(&kernels::FILL, "fill", "f32").unwrap();
    assert_eq!(d.compile_stats().compiled, want);
    let n = 1000usize;
    let out = d.alloc(n * 4).unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(&out).push(2.5f32).push(n as u64);
    launch_1d(&d, &f, n as u64, &mut args);
    let mut host = vec![0u8; n * 4];
    d.copy_dtoh(&out, 0, &mut host).unwrap();
    assert!(host
        .chunks_exact(4)
        .all(|c| f32::from_le_bytes(c.try_into().unwrap()) == 2.5));
    // a second prepare has nothing to do; a key no module has is no error
    d.prepare_keys(kernels::ALL_MODULES, &["f32", "no-such-key"])
        .unwrap();
    assert_eq!(d.compile_stats().compiled, want);
}

#[test]
fn the_first_kernel_of_a_key_compiles_its_usual_companions_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let d = fresh_device(dir.path(), 4);
    d.set_companions(kernels::companions);
    d.kernel(&kernels::FILL, "fill", "bf16").unwrap();
    // each usual module's bf16 variant, and the byte-moving ones' 2- and 16-byte widths
    let companions = kernels::ALL_MODULES
        .iter()
        .filter(|m| kernels::PREFETCH_MODULES.contains(&m.name))
        .map(|m| {
            let keys = m.filter_keys();
            ["bf16", "w2", "w16"]
                .iter()
                .filter(|k| keys.contains(k))
                .count() as u64
        })
        .sum::<u64>();
    assert!(companions > kernels::PREFETCH_MODULES.len() as u64);
    let t = std::time::Instant::now();
    while d.compile_stats().compiled < companions && t.elapsed().as_secs() < 300 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(d.compile_stats().compiled, companions);
    // they were compiled, not yet loaded: the launch path loads them without compiling
    d.kernel(&kernels::BINARY, "mul", "bf16").unwrap();
    d.kernel(&kernels::UNARY, "exp", "bf16").unwrap();
    assert_eq!(d.compile_stats().compiled, companions);
    // with no compile threads nothing starts behind the caller's back
    let dir = tempfile::tempdir().unwrap();
    let quiet = fresh_device(dir.path(), 0);
    quiet.kernel(&kernels::FILL, "fill", "f16").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(quiet.compile_stats().compiled, 1);
}

/// The cross-lane primitives and a planted bug, compiled for whichever wavefront the device
/// has: each lane writes what every primitive gave it.
const WAVE_SELFTEST: &str = r#"
#define N_XOR 8
#define N_DOWN 5
#define N_SRC 5
__constant__ int xor_masks[N_XOR] = {1, 2, 4, 8, 16, 32, 63, 100};
__constant__ unsigned down_deltas[N_DOWN] = {1, 16, 33, 63, 64};
__constant__ int src_lanes[N_SRC] = {0, 5, 40, 63, 70};
// out: per thread N_XOR + N_DOWN + N_SRC values (u32), then 2 words of its ballot
KERNEL void wave_primitives(u32* out) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    // 1000 x (the block's wavefront, numbered from blockIdx.x * 64) + the lane
    const u32 v = 1000u * (blockIdx.x * 64u + threadIdx.x / warpSize) + threadIdx.x % warpSize;
    u32* o = out + t * (N_XOR + N_DOWN + N_SRC + 2);
    for (int i = 0; i < N_XOR; ++i) o[i] = warp_shfl_xor(v, xor_masks[i]);
    for (int i = 0; i < N_DOWN; ++i) o[N_XOR + i] = warp_shfl_down(v, down_deltas[i]);
    for (int i = 0; i < N_SRC; ++i) o[N_XOR + N_DOWN + i] = warp_shfl(v, src_lanes[i]);
    const lane_mask_t b = warp_ballot((threadIdx.x % warpSize) % 3 == 0);
    o[N_XOR + N_DOWN + N_SRC] = (u32)b;
    o[N_XOR + N_DOWN + N_SRC + 1] = (u32)(b >> 32);
}
// The planted bug: a wavefront sum whose butterfly starts at 16 (right for 32 lanes only).
KERNEL void sum_from_16(const float* x, float* out) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[t];
    for (int m = 16; m > 0; m /= 2) v += warp_shfl_xor(v, m);
    if (threadIdx.x % warpSize == 0) out[t / warpSize] = v;
}
"#;

/// What AMD's semantics give lane `lane` of a `width`-lane wavefront whose lanes hold
/// `base + lane` (`live` lanes in it): the `wave_primitives` layout.
fn wave_model(base: u32, lane: u32, width: u32, live: u32) -> Vec<u32> {
    let own = base + lane;
    let at = |src: u32| if src < width { base + src } else { own };
    let mut out = Vec::new();
    for m in [1u32, 2, 4, 8, 16, 32, 63, 100] {
        out.push(at(lane ^ m));
    }
    for d in [1u32, 16, 33, 63, 64] {
        out.push(if lane + d < width {
            base + lane + d
        } else {
            own
        });
    }
    for s in [0u32, 5, 40, 63, 70] {
        out.push(base + (s & (width - 1)));
    }
    let ballot: u64 = (0..live.min(width))
        .filter(|l| l % 3 == 0)
        .fold(0, |b, l| b | 1u64 << l);
    out.push(ballot as u32);
    out.push((ballot >> 32) as u32);
    out
}

fn wave_device(emulated: bool) -> Device {
    // The emulation is the nvidia platform's (also under the amd shim, which runs on CUDA).
    let config = Config {
        platform: Some(rocm_device::Platform::Nvidia),
        wave64_emulation: emulated,
        compile_threads: 0,
        ..Config::global().unwrap().clone()
    };
    Device::with_config(0, config).unwrap()
}

#[test]
fn emulated_wave64_primitives_follow_amds_semantics() {
    let d = wave_device(true);
    assert_eq!(d.info().warp_size, 64);
    let src = format!("{}\n{WAVE_SELFTEST}", kernels::prelude());
    let m = d.load_source("wave_selftest", &src).unwrap();
    let f = m.function("wave_primitives").unwrap();
    let per = 8 + 5 + 5 + 2;
    // 2 blocks of 160 threads: wavefronts of 64, 64 and a last one of 32 (one warp)
    let (blocks, threads) = (2u32, 160u32);
    let n = (blocks * threads) as usize;
    let out = d.alloc_zeroed(n * per * 4).unwrap();
    let mut args = LaunchArgs::new();
    args.push_buffer(&out);
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [threads, 1, 1],
        shared_mem_bytes: 0,
    };
    d.launch(&f, config, &mut args).unwrap();
    let mut host = vec![0u8; n * per * 4];
    d.copy_dtoh(&out, 0, &mut host).unwrap();
    let got: Vec<u32> = host
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for t in 0..n as u32 {
        let (block, block_t) = (t / threads, t % threads);
        let lane = block_t % 64;
        let live = threads - block_t / 64 * 64; // lanes the wavefront has
        let want = wave_model(1000 * (block * 64 + block_t / 64), lane, 64, live);
        let row = &got[t as usize * per..(t as usize + 1) * per];
        if lane >= live.min(64) {
            continue;
        }
        // in a last wavefront of 32 lanes, sources 32..63 are not there: AMD reads garbage
        // from them; only the sources inside it and the ballot are compared
        for (i, (g, w)) in row.iter().zip(&want).enumerate() {
            let src_missing = live < 64 && *w % 1000 >= live && i < per - 2;
            if !src_missing {
                assert_eq!(
                    g, w,
                    "thread {t} (lane {lane}) primitive #{i}: {row:?} vs {want:?}"
                );
            }
        }
    }
}

#[test]
fn a_reduction_that_stops_at_32_lanes_is_caught_by_wave64() {
    // The planted bug passes with 32-lane warps and fails with emulated 64-lane wavefronts.
    let x: Vec<f32> = (0..256).map(|i| (i % 7) as f32).collect();
    let mut wrong = Vec::new();
    for emulated in [false, true] {
        let d = wave_device(emulated);
        let ws = d.info().warp_size as usize;
        let src = format!("{}\n{WAVE_SELFTEST}", kernels::prelude());
        let m = d.load_source("wave_selftest", &src).unwrap();
        let f = m.function("sum_from_16").unwrap();
        let xb = d.htod(&x).unwrap();
        let out = d.alloc_zeroed(x.len() / ws * 4).unwrap();
        let mut args = LaunchArgs::new();
        args.push_buffer(xb.as_buffer()).push_buffer(&out);
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [x.len() as u32, 1, 1],
            shared_mem_bytes: 0,
        };
        d.launch(&f, config, &mut args).unwrap();
        let mut host = vec![0u8; out.len()];
        d.copy_dtoh(&out, 0, &mut host).unwrap();
        let sums: Vec<f32> = host
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let want: Vec<f32> = x.chunks(ws).map(|c| c.iter().sum()).collect();
        wrong.push(sums != want);
    }
    assert_eq!(wrong, [false, true], "(32 lanes wrong, 64 lanes wrong)");
}

/// A captured chain of launches (iota, copy, copy through a buffer allocated and freed inside
/// the capture) replays with the effect of running it, reads inputs rewritten between
/// replays, and gives its arena back when dropped.
#[test]
fn a_captured_graph_replays_the_recorded_work() {
    let d = Device::with_config(0, Config::global().unwrap().clone()).unwrap();
    let n = 1usize << 16;
    let iota = d.kernel(&kernels::FILL, "iota", "u32").unwrap();
    let copy = d.kernel(&kernels::FILL, "copy", "u32").unwrap();
    let input = d.alloc_typed::<u32>(n).unwrap();
    let out = d.alloc_typed::<u32>(n).unwrap();
    d.memset(out.as_buffer(), 0, n * 4, 0xff).unwrap();
    // Once uncaptured, so the pool holds a block of the temporary's size.
    drop(d.alloc_typed::<u32>(n).unwrap());
    let baseline = d.memory_stats();
    let mut start = 5u32;
    let write_input = |start: u32| {
        let mut args = LaunchArgs::new();
        args.push_buffer(input.as_buffer())
            .push(start)
            .push(3u32)
            .push(n as u64);
        launch_1d(&d, &iota, n as u64, &mut args);
    };
    write_input(start);
    let (graph, ()) = d
        .capture(|| -> Result<(), Error> {
            let temp = d.alloc_typed::<u32>(n)?;
            let mut args = LaunchArgs::new();
            args.push_buffer(input.as_buffer())
                .push_buffer(temp.as_buffer())
                .push(n as u64);
            d.launch(
                &copy,
                LaunchConfig::for_elements(n as u64, d.info()),
                &mut args,
            )?;
            let mut args = LaunchArgs::new();
            args.push_buffer(temp.as_buffer())
                .push_buffer(out.as_buffer())
                .push(n as u64);
            d.launch(
                &copy,
                LaunchConfig::for_elements(n as u64, d.info()),
                &mut args,
            )
        })
        .unwrap();
    // Nothing ran during the capture.
    assert!(d.dtoh(&out).unwrap().iter().all(|&v| v == u32::MAX));
    assert_eq!(d.memory_stats().graph_reserved_bytes, n * 4);
    for _ in 0..3 {
        graph.replay().unwrap();
        let got = d.dtoh(&out).unwrap();
        let want: Vec<u32> = (0..n as u32).map(|i| start + 3 * i).collect();
        assert!(got == want, "replay from start {start}");
        // Work between replays allocates too; the arena's block is not among its choices.
        let other = d.alloc_typed::<u32>(n).unwrap();
        d.memset(other.as_buffer(), 0, n * 4, 0).unwrap();
        start += 1000;
        write_input(start);
    }
    drop(graph);
    d.synchronize().unwrap();
    let after = d.memory_stats();
    assert_eq!(after.graph_reserved_bytes, 0);
    assert_eq!(after.in_use_bytes, baseline.in_use_bytes);
}

/// A host copy, a synchronize or a nested capture inside a capture is a typed error, and the
/// device works normally afterwards.
#[test]
fn waiting_inside_a_capture_is_a_typed_error() {
    let d = Device::with_config(0, Config::global().unwrap().clone()).unwrap();
    let buf = d.htod(&[1u32, 2, 3]).unwrap();
    let err = d.capture(|| d.dtoh(&buf)).unwrap_err();
    assert!(matches!(err, Error::Capture(_)), "{err}");
    let err = d.capture(|| d.synchronize()).unwrap_err();
    assert!(err.to_string().contains("synchronize"), "{err}");
    let err = d
        .capture(|| d.capture(|| Ok::<(), Error>(())).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("already running"), "{err}");
    assert!(!d.is_capturing());
    assert_eq!(d.dtoh(&buf).unwrap(), vec![1, 2, 3]);
    assert_eq!(d.memory_stats().graph_reserved_bytes, 0);
}

#[test]
fn tickets_are_shared_grow_on_demand_and_are_refused_first_inside_a_capture() {
    let d = device();
    let small = d.tickets(10).unwrap();
    assert!(small.count() >= 10);
    // a second call within the count hands out the same counters
    let again = d.tickets(small.count()).unwrap();
    let (mut a, mut b) = (LaunchArgs::new(), LaunchArgs::new());
    a.push_tickets(&small);
    b.push_tickets(&again);
    assert_eq!(a.bytes(0), b.bytes(0));
    // more than any before: a new, larger set
    let big = d.tickets(small.count() + 1).unwrap();
    assert!(big.count() > small.count());
    let mut c = LaunchArgs::new();
    c.push_tickets(&big);
    assert_ne!(a.bytes(0), c.bytes(0));
    // inside a capture, a set that already exists is handed out; a larger one is an error
    let (_graph, inside) = d.capture(|| d.tickets(big.count())).unwrap();
    assert_eq!(inside.count(), big.count());
    let err = d.capture(|| d.tickets(big.count() * 2)).unwrap_err();
    assert!(err.to_string().contains("capture"), "{err}");
    d.synchronize().unwrap();
}
