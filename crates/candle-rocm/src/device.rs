//! `RocmDevice`: one GPU handle (its stream, pool and kernels), the BLAS and DNN handles made
//! on first use, and the random generator's state. Cheap to clone; clones share everything.

use std::sync::{Arc, Mutex};

use rocm_blas::{Blas, BlasOptions};
use rocm_device::{Buffer, Config, DType, Device, Error, Result};
use rocm_dnn::{Dnn, DnnOptions};
use rocm_elementwise::random;
use rocm_indexing::IndexOptions;
use rocm_kernels as kernels;

use crate::RocmStorage;

/// The seed a device starts with.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// Counter-based generator state: a draw uses (seed, offset) and advances the offset.
#[derive(Debug, Clone, Copy)]
struct RngState {
    seed: u64,
    offset: u64,
}

/// The op crates' options a device uses, each crate's own type (the runtime's are in
/// [`Config`]); [`Options::global`] is the environment's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub index: IndexOptions,
    pub blas: BlasOptions,
    pub dnn: DnnOptions,
}

impl Options {
    /// Each crate's options from the process's environment (read once).
    pub fn global() -> Self {
        Options {
            index: IndexOptions::global(),
            blas: BlasOptions::global(),
            dnn: DnnOptions::global(),
        }
    }
}

struct Inner {
    device: Device,
    blas: Mutex<Option<Arc<Blas>>>,
    dnn: Mutex<Option<Arc<Dnn>>>,
    rng: Mutex<RngState>,
    options: Options,
}

/// A GPU as Candle's backend device: `BackendDevice`'s 13 methods (names and semantics as in
/// Candle 0.11.1) plus memory statistics.
#[derive(Clone)]
pub struct RocmDevice {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RocmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RocmDevice({:?})", self.inner.device)
    }
}

impl RocmDevice {
    /// The device of `ordinal` on the selected platform, with the process's configuration and
    /// options (the environment, read once: `rocm_device::Config::global`, [`Options::global`]).
    pub fn new(ordinal: usize) -> Result<Self> {
        Ok(Self::from_device(Device::new(ordinal)?, Options::global()))
    }

    /// The device of `ordinal` with `config` (platform, kernel cache, pool, compiles) and the
    /// environment's options.
    pub fn with_config(ordinal: usize, config: Config) -> Result<Self> {
        Self::with_options(ordinal, config, Options::global())
    }

    /// The device of `ordinal` with `config` and `options` (index checks, MIOpen,
    /// reduced-precision gemms): how code sets them without the environment.
    pub fn with_options(ordinal: usize, config: Config, options: Options) -> Result<Self> {
        Ok(Self::from_device(
            Device::with_config(ordinal, config)?,
            options,
        ))
    }

    /// The configuration this device was opened with.
    pub fn config(&self) -> &Config {
        self.inner.device.config()
    }

    /// The op crates' options this device uses.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// How many devices the selected platform (`CANDLE_ROCM_PLATFORM`) has, or why it has none.
    pub fn count() -> Result<usize> {
        rocm_device::selected_platform()?.device_count()
    }

    /// Wraps an opened device handle.
    pub fn from_device(device: Device, options: Options) -> Self {
        // the first kernel of a dtype brings the table's usual companions in the background
        device.set_companions(kernels::companions);
        RocmDevice {
            inner: Arc::new(Inner {
                blas: Mutex::new(None),
                dnn: Mutex::new(None),
                rng: Mutex::new(RngState {
                    seed: DEFAULT_SEED,
                    offset: 0,
                }),
                options,
                device,
            }),
        }
    }

    /// The runtime handle underneath.
    pub fn raw(&self) -> &Device {
        &self.inner.device
    }

    /// The ordinal (Candle's `DeviceLocation::Rocm { gpu_id }`).
    pub fn ordinal(&self) -> usize {
        self.inner.device.info().ordinal
    }

    /// The same handle (clones of one `RocmDevice`): work on it shares one stream.
    pub fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The BLAS handle, made on first use (rocBLAS or cuBLAS is loaded then).
    pub fn blas(&self) -> Result<Arc<Blas>> {
        let mut slot = self.inner.blas.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = slot.as_ref() {
            return Ok(b.clone());
        }
        let b = Arc::new(Blas::with_options(
            &self.inner.device,
            self.inner.options.blas,
        )?);
        *slot = Some(b.clone());
        Ok(b)
    }

    /// The convolution handle, made on first use (MIOpen is loaded then, on amd).
    pub fn dnn(&self) -> Result<Arc<Dnn>> {
        let mut slot = self.inner.dnn.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(Dnn::with_options(self.blas()?, self.inner.options.dnn)?);
        *slot = Some(d.clone());
        Ok(d)
    }

    pub(crate) fn storage(&self, buffer: Buffer, dtype: DType) -> RocmStorage {
        RocmStorage::new(buffer, dtype, self.clone())
    }

    /// `zeros_impl`: `len` zero elements of `dtype`.
    pub fn zeros(&self, len: usize, dtype: DType) -> Result<RocmStorage> {
        let buf = self
            .inner
            .device
            .alloc_zeroed(len * dtype.size_in_bytes())?;
        Ok(self.storage(buf, dtype))
    }

    /// `alloc_uninit`: `len` elements of `dtype` whose contents are unspecified (device
    /// memory: reading it is defined, its values are not).
    pub fn alloc_uninit(&self, len: usize, dtype: DType) -> Result<RocmStorage> {
        let buf = self.inner.device.alloc(len * dtype.size_in_bytes())?;
        Ok(self.storage(buf, dtype))
    }

    /// `storage_from_slice` / `storage_from_cpu_storage`: host elements of `dtype` as their
    /// little-endian bytes (f8e4m3 as its bit patterns).
    pub fn storage_from_bytes(&self, dtype: DType, bytes: &[u8]) -> Result<RocmStorage> {
        if bytes.len() % dtype.size_in_bytes() != 0 {
            return Err(Error::SizeMismatch {
                op: "storage_from_bytes",
                detail: format!(
                    "{} bytes are not a whole number of {dtype} elements",
                    bytes.len()
                ),
            });
        }
        let buf = self.inner.device.alloc(bytes.len())?;
        self.inner.device.copy_htod(bytes, &buf, 0)?;
        Ok(self.storage(buf, dtype))
    }

    /// `storage_from_slice` / `storage_from_cpu_storage` without a host copy of the bytes:
    /// `values` (elements of `dtype`, `N` = its size) written as `to_le` gives them straight into
    /// the page-locked staging of the upload, which the host does not wait for.
    pub fn storage_from_elements<T: Copy, const N: usize>(
        &self,
        dtype: DType,
        values: &[T],
        to_le: fn(T) -> [u8; N],
    ) -> Result<RocmStorage> {
        if N != dtype.size_in_bytes() {
            return Err(Error::SizeMismatch {
                op: "storage_from_elements",
                detail: format!("{N}-byte elements given as {dtype}"),
            });
        }
        let buf = self.inner.device.alloc(values.len() * N)?;
        self.inner
            .device
            .copy_htod_with(&buf, 0, values.len() * N, &mut |at, out| {
                // pieces start on element boundaries (the staging's size is a multiple of N)
                for (o, &x) in out.chunks_exact_mut(N).zip(&values[at / N..]) {
                    o.copy_from_slice(&to_le(x));
                }
                Ok(())
            })?;
        Ok(self.storage(buf, dtype))
    }

    /// `rand_uniform`: `len` draws in [lo, hi) for bf16, f16, f32, f64 and f8e4m3
    /// (rocm-elementwise's `random::uniform`).
    pub fn rand_uniform(&self, len: usize, dtype: DType, lo: f64, hi: f64) -> Result<RocmStorage> {
        let out = self.draw(len, |d| {
            random::uniform(&self.inner.device, (len, dtype), d, (lo, hi))
        })?;
        Ok(self.storage(out, dtype))
    }

    /// `rand_normal`: `len` draws of N(mean, std^2) (Box-Muller), same dtypes.
    pub fn rand_normal(
        &self,
        len: usize,
        dtype: DType,
        mean: f64,
        std: f64,
    ) -> Result<RocmStorage> {
        let out = self.draw(len, |d| {
            random::normal(&self.inner.device, (len, dtype), d, (mean, std))
        })?;
        Ok(self.storage(out, dtype))
    }

    /// `run` with the generator's state; a draw of `len > 0` that ran moves the next one to
    /// the next offset.
    fn draw(&self, len: usize, run: impl FnOnce(random::Draw) -> Result<Buffer>) -> Result<Buffer> {
        let mut rng = self.inner.rng.lock().unwrap_or_else(|e| e.into_inner());
        let out = run(random::Draw {
            seed: rng.seed,
            offset: rng.offset,
        })?;
        if len > 0 {
            rng.offset += 1;
        }
        Ok(out)
    }

    /// `set_seed`: later draws restart from this seed.
    pub fn set_seed(&self, seed: u64) -> Result<()> {
        *self.inner.rng.lock().unwrap_or_else(|e| e.into_inner()) = RngState { seed, offset: 0 };
        Ok(())
    }

    /// `get_current_seed`: the seed last set (or [`DEFAULT_SEED`]).
    pub fn get_current_seed(&self) -> Result<u64> {
        Ok(self
            .inner
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seed)
    }

    /// `synchronize`: waits for all work queued on the device's stream.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.device.synchronize()
    }

    /// The memory pool's counters (in use, cached, peak, hits, misses).
    pub fn memory_stats(&self) -> rocm_device::MemoryStats {
        self.inner.device.memory_stats()
    }

    /// Returns the pool's cached blocks to the driver; the bytes released.
    pub fn empty_cache(&self) -> Result<usize> {
        self.inner.device.empty_cache()
    }

    /// Compiles and loads every kernel module a model of these dtypes can use, in parallel
    /// (`CANDLE_ROCM_COMPILE_THREADS`, default the machine's cores), before the first forward
    /// pass: a model's first call then compiles nothing. Quantized models can name GGUF
    /// types too through [`Device::prepare_keys`] on [`RocmDevice::raw`].
    pub fn prepare(&self, dtypes: &[DType]) -> Result<()> {
        let keys: Vec<&'static str> = dtypes.iter().map(|d| d.as_str()).collect();
        self.inner.device.prepare_keys(kernels::ALL_MODULES, &keys)
    }

    /// Records the work `f` queues on this device into a graph that `Graph::replay` runs
    /// with one launch ([`Device::capture`] gives the rules: no host copies inside `f`,
    /// buffers outlive the graph, values that change between replays live in device buffers
    /// rewritten in place, random draws repeat their capture's numbers).
    pub fn capture<T, E: From<rocm_device::Error>>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<(rocm_device::Graph, T), E> {
        self.inner.device.capture(f)
    }

    /// Starts compiling, in the background, the quantized kernels that matrices of GGUF type
    /// `ty` will need (their block type's, and the f32 activations' quantizer): called as a
    /// GGUF file's tensors reach the device, so the compiles overlap the rest of the load.
    pub fn prefetch_quantized(&self, ty: crate::quantized::GgmlType) {
        rocm_quantized::compile_in_background(&self.inner.device, ty);
    }
}
