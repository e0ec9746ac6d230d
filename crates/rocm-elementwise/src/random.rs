//! Random draws on the device: a counter-based generator, so a draw is fixed by its (seed,
//! offset) and the caller keeps the state (candle-rocm advances the offset a draw).

use rocm_device::{Buffer, DType, Device, Error, Result};
use rocm_kernels::{random as abi, DevicePtr, Entry, KernelParams, RANDOM};

/// A generator's state for one draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    pub seed: u64,
    pub offset: u64,
}

/// `len` draws in [lo, hi) for bf16, f16, f32, f64 and f8e4m3, computed in f64 for f64 and in
/// f32 for the others: rounding to a narrow dtype may reach `hi`.
pub fn uniform(
    device: &Device,
    (len, dtype): (usize, DType),
    draw: Draw,
    (lo, hi): (f64, f64),
) -> Result<Buffer> {
    run(device, abi::UNIFORM, (len, dtype), |out, n| {
        abi::UniformParams {
            out,
            n,
            seed: draw.seed,
            offset: draw.offset,
            lo,
            hi,
        }
    })
}

/// `len` draws of N(mean, std^2) (Box-Muller), same dtypes.
pub fn normal(
    device: &Device,
    (len, dtype): (usize, DType),
    draw: Draw,
    (mean, std): (f64, f64),
) -> Result<Buffer> {
    run(device, abi::NORMAL, (len, dtype), |out, n| {
        abi::NormalParams {
            out,
            n,
            seed: draw.seed,
            offset: draw.offset,
            mean,
            std,
        }
    })
}

/// `len` draws of `entry`, its list made by `params` from the output and the count.
fn run<P: KernelParams>(
    device: &Device,
    entry: Entry<P>,
    (len, dtype): (usize, DType),
    params: impl FnOnce(DevicePtr, u64) -> P,
) -> Result<Buffer> {
    if RANDOM.entry_point(entry.op, dtype.as_str()).is_none() {
        return Err(Error::UnsupportedDType {
            op: entry.op,
            dtype,
        });
    }
    let out = device.alloc(len * dtype.size_in_bytes())?;
    if len == 0 {
        return Ok(out);
    }
    // a thread a pair of draws
    let pairs = len.div_ceil(2) as u64;
    let params = params(out.ptr(), len as u64);
    device.launch_entry_elements(entry, dtype.as_str(), pairs, &params)?;
    Ok(out)
}
