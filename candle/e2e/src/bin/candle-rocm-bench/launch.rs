//! Host time per launch, layer by layer: the same 4 K-element op (exp, f32) through each
//! layer between Candle and the driver, so the time each layer adds can be read off. Two
//! figures each: wall time per call in long loops of calls (bound by the slower of the host
//! and the device's launch throughput), and the host's time alone (short batches, the clock
//! stopped before the synchronization).
//!
//! - `driver`: rocm-device's launch of a resolved kernel with prebuilt arguments (the floor:
//!   checks, then the platform's launch call);
//! - `resolve + launch`: the same with the kernel looked up by (module, op, dtype);
//! - `op crate`: `rocm_elementwise::unary` (output from the pool, layout, arguments, launch);
//! - `candle-rocm`: `RocmStorage::unary`;
//! - `Candle`: `Tensor::exp` on `Device::Rocm`, and on `Device::Cuda` as the peer.

use std::time::Instant;

use candle_core::{Device, Result, Tensor};
use serde_json::json;

const N: usize = 4096;

/// Host time alone: 256 calls queued between synchronizations (fewer than a stream queues
/// without blocking), the clock stopped before the synchronization; median of 15 batches.
fn enqueue_per_call(
    sync: &dyn Fn() -> Result<()>,
    f: &mut dyn FnMut() -> Result<()>,
) -> Result<f64> {
    let mut samples = Vec::new();
    for _ in 0..15 {
        sync()?;
        let start = Instant::now();
        for _ in 0..256 {
            f()?;
        }
        samples.push(start.elapsed().as_secs_f64() / 256.0);
    }
    sync()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

fn per_call(sync: &dyn Fn() -> Result<()>, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..200 {
        f()?;
    }
    sync()?;
    let per_batch = 2000;
    let mut samples = Vec::new();
    for _ in 0..9 {
        let start = Instant::now();
        for _ in 0..per_batch {
            f()?;
        }
        sync()?;
        samples.push(start.elapsed().as_secs_f64() / per_batch as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// (wall time per call in long loops, host time per call alone).
fn both(sync: &dyn Fn() -> Result<()>, f: &mut dyn FnMut() -> Result<()>) -> Result<(f64, f64)> {
    Ok((per_call(sync, f)?, enqueue_per_call(sync, f)?))
}

fn rocm_err(e: rocm_device::Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

/// One JSON line per layer.
pub fn run(cuda: Option<&Device>) -> Result<()> {
    let dev = Device::new_rocm(0)?;
    let Device::Rocm(rocm) = &dev else {
        candle_core::bail!("launch: needs Device::Rocm");
    };
    let raw = rocm.inner().raw().clone();
    let sync = || raw.synchronize().map_err(rocm_err);
    let x = Tensor::rand(0f32, 1f32, N, &dev)?;
    let mut rows = Vec::new();

    // driver floor: the fill kernel (the launch cost does not depend on the kernel)
    let out = raw.alloc_typed::<f32>(N).map_err(rocm_err)?;
    let fill = raw
        .kernel(&rocm_kernels::FILL, "fill", "f32")
        .map_err(rocm_err)?;
    let config = rocm_device::LaunchConfig::for_elements(N as u64, raw.info());
    let mut args = rocm_device::LaunchArgs::new();
    args.push_buffer(out.as_buffer()).push(1f32).push(N as u64);
    rows.push((
        "driver: launch of a resolved kernel, arguments prebuilt",
        both(&sync, &mut || {
            raw.launch(&fill, config, &mut args).map_err(rocm_err)
        })?,
    ));
    let mut args = rocm_device::LaunchArgs::new();
    args.push_buffer(out.as_buffer()).push(1f32).push(N as u64);
    rows.push((
        "resolve + launch: kernel looked up by (module, op, dtype)",
        both(&sync, &mut || {
            raw.launch_elements((&rocm_kernels::FILL, "fill", "f32"), N as u64, &mut args)
                .map_err(rocm_err)
        })?,
    ));

    // the op crate and candle-rocm on x's storage
    let (guard, layout) = x.storage_and_layout();
    let candle_core::Storage::Rocm(storage) = &*guard else {
        candle_core::bail!("launch: x is not on the ROCm device");
    };
    let inner = storage.inner();
    let rocm_layout =
        candle_rocm::Layout::new(layout.dims(), layout.stride(), layout.start_offset());
    rows.push((
        "op crate: rocm_elementwise::unary (exp)",
        both(&sync, &mut || {
            let operand = rocm_device::Operand::new(inner.buffer(), inner.dtype(), &rocm_layout);
            rocm_elementwise::unary(&raw, rocm_elementwise::UnaryOp::Exp, operand)
                .map(drop)
                .map_err(rocm_err)
        })?,
    ));
    rows.push((
        "candle-rocm: RocmStorage::unary (exp)",
        both(&sync, &mut || {
            inner
                .unary(candle_rocm::UnaryOp::Exp, &rocm_layout)
                .map(drop)
                .map_err(rocm_err)
        })?,
    ));
    drop(guard);
    let dev_sync = || dev.synchronize();
    rows.push((
        "Candle: Tensor::exp on Device::Rocm",
        both(&dev_sync, &mut || x.exp().map(drop))?,
    ));
    let y = Tensor::rand(0f32, 1f32, N, &dev)?;
    rows.push((
        "Candle: Tensor::add on Device::Rocm",
        both(&dev_sync, &mut || (&x + &y).map(drop))?,
    ));
    for (layer, (seconds, host)) in rows {
        println!(
            "{}",
            json!({"bench": "launch", "device": "rocm", "layer": layer, "us_per_call": seconds * 1e6, "host_us_per_call": host * 1e6})
        );
    }
    if let Some(cuda) = cuda {
        let x = Tensor::rand(0f32, 1f32, N, cuda)?;
        let y = Tensor::rand(0f32, 1f32, N, cuda)?;
        let cuda_sync = || cuda.synchronize();
        for (layer, (seconds, host)) in [
            (
                "Candle: Tensor::exp on Device::Cuda",
                both(&cuda_sync, &mut || x.exp().map(drop))?,
            ),
            (
                "Candle: Tensor::add on Device::Cuda",
                both(&cuda_sync, &mut || (&x + &y).map(drop))?,
            ),
        ] {
            println!(
                "{}",
                json!({"bench": "launch", "device": "cuda", "layer": layer, "us_per_call": seconds * 1e6, "host_us_per_call": host * 1e6})
            );
        }
    }
    Ok(())
}
