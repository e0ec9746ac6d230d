//! Device handles, buffers, the default stream, events, modules and launches.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::compile::{self, CompileProgress, CompileRequest, Origin};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::launch::{LaunchArgs, LaunchConfig};
use crate::platform::{self, AllocFailure, DevicePtr, Handle, Platform, RawDevice};
use crate::pool::{Block, MemoryStats, Pool, RawAllocator};

/// What a device is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub platform: Platform,
    pub name: String,
    /// gcnArchName such as `gfx942:sramecc+:xnack-`, or `sm_90`.
    pub arch: String,
    pub warp_size: u32,
    pub multiprocessor_count: u32,
    pub shared_mem_per_block: usize,
    pub max_threads_per_block: u32,
    pub total_memory: usize,
}

impl DeviceInfo {
    /// The arch without feature flags (`gfx942` for `gfx942:sramecc+:xnack-`).
    pub fn base_arch(&self) -> &str {
        self.arch.split(':').next().unwrap_or(&self.arch)
    }
}

/// How the modules of a device were obtained, and what that cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompileStats {
    pub compiled: u64,
    pub disk_hits: u64,
    pub memory_hits: u64,
    pub compile_time: Duration,
    pub disk_load_time: Duration,
    pub module_load_time: Duration,
}

/// A kernel as launchers name it: (module, op, dtype or width key), all from the table.
type KernelKey = (&'static str, &'static str, &'static str);

/// The kernel map's hasher: the keys are a few short table strings looked up on every
/// launch, where SipHash's flood resistance buys nothing (multiply-rotate, as rustc's Fx).
#[derive(Default, Clone, Copy)]
struct KeyHasher;

impl std::hash::BuildHasher for KeyHasher {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u8(&mut self, b: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

struct DeviceInner {
    raw: Arc<dyn RawDevice>,
    info: DeviceInfo,
    config: Config,
    stream: Stream,
    pool: Pool,
    modules: Mutex<HashMap<String, Arc<Module>>>,
    /// Resolved kernels: the one lock a launch of a known kernel takes.
    kernels: Mutex<HashMap<KernelKey, Function, KeyHasher>>,
    compile_stats: Mutex<CompileStats>,
    memory_hits: AtomicU64,
    cache_dir: Option<PathBuf>,
    compiler_version: OnceLock<String>,
    /// Images compiled and not yet loaded, by module name, each compiled once however many
    /// threads want it.
    compiles: Mutex<HashMap<String, CompileSlot>>,
    /// Keys whose common modules went to the background compilers.
    prefetched: Mutex<HashSet<&'static str>>,
    progress: CompileProgress,
}

/// One module's image: the first thread to want it compiles (or reads the disk cache) under
/// the slot's lock; the others wait there and take the image. A failed compile leaves the
/// slot empty for the next caller to retry and report.
type CompileSlot = Arc<Mutex<Option<Arc<Vec<u8>>>>>;

/// Wavefronts a block may hold with emulated wave64 (CANDLE_ROCM_WAVE64_MAX_WAVES in compat.h).
const WAVE64_MAX_WAVES: u32 = 8;

/// Modules nearly every model of a dtype uses: when a kernel of a key is first needed, the
/// variants of these for that key compile in the background ([`Device::kernel`]).
pub const PREFETCH_MODULES: [&str; 9] = [
    "unary", "binary", "cast", "fill", "reduce", "norm", "indexing", "ternary", "rope",
];

/// Background compiles and process exit. A compile thread still inside NVRTC or hiprtc, or
/// still dropping its device handle, must not run while the process tears down its
/// libraries: every worker is enlisted before it is spawned and leaves only after its device
/// handle is gone; once the first background compile is queued, an `atexit` handler stops the
/// workers from taking more work, waits (at most `EXIT_WAIT`) for every enlisted one to leave,
/// and joins their threads.
struct BackgroundWorker;

static LIVE_WORKERS: Mutex<usize> = Mutex::new(0);
/// The workers' threads, joined at exit (finished ones are dropped as new ones start).
static WORKER_THREADS: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());
static WORKER_LEFT: std::sync::Condvar = std::sync::Condvar::new();
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether the exit handler has been registered (background compiles exist).
static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Longer than any one module's compile.
const EXIT_WAIT: Duration = Duration::from_secs(60);

impl BackgroundWorker {
    /// Counts one worker until dropped; `None` once the process is exiting.
    fn enlist() -> Option<Self> {
        let mut live = LIVE_WORKERS.lock().unwrap_or_else(|p| p.into_inner());
        if EXITING.load(Ordering::SeqCst) {
            return None;
        }
        *live += 1;
        Some(BackgroundWorker)
    }

    /// Whether workers should stop taking work.
    fn exiting() -> bool {
        EXITING.load(Ordering::SeqCst)
    }

    /// Registers the exit handler when the first background compile is queued.
    fn wait_at_exit() {
        if !REGISTERED.load(Ordering::SeqCst) {
            Self::register_exit_handler();
        }
    }

    /// Registers the exit handler (again). C and C++ teardown runs in the reverse order of
    /// registration, and NVRTC registers some of its own lazily, inside a compile: a handler
    /// registered once, before those, ran after them, while a worker was still compiling
    /// (the exit crashes of Candle's device-test binaries). So it is registered again after
    /// every compile once background compiles exist, which keeps it ahead of all of the
    /// compiler's teardown. Running it more than once is a no-op.
    fn register_exit_handler() {
        extern "C" fn on_exit() {
            EXITING.store(true, Ordering::SeqCst);
            let live = LIVE_WORKERS.lock().unwrap_or_else(|p| p.into_inner());
            let (live, waited) = WORKER_LEFT
                .wait_timeout_while(live, EXIT_WAIT, |n| *n > 0)
                .unwrap_or_else(|p| p.into_inner());
            drop(live);
            if waited.timed_out() {
                return;
            }
            // Every worker has left its work; wait for the threads themselves to end: a
            // thread's own teardown (the CUDA driver's and NVRTC's per-thread state) must not
            // run while the process tears those libraries down.
            let threads =
                std::mem::take(&mut *WORKER_THREADS.lock().unwrap_or_else(|p| p.into_inner()));
            for thread in threads {
                let _ = thread.join();
            }
        }
        extern "C" {
            fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
        }
        REGISTERED.store(true, Ordering::SeqCst);
        // SAFETY: C's atexit with a function that never unwinds (no panicking call) and
        // touches only statics; it runs on the exiting thread before libraries unload.
        if unsafe { atexit(on_exit) } != 0 {
            tracing::warn!("no exit handler for background compiles");
        }
    }

    /// After a compile: the compiler may have registered teardown of its own; register the
    /// exit handler after it (only once background compiles exist).
    fn after_compile() {
        if REGISTERED.load(Ordering::SeqCst) && !EXITING.load(Ordering::SeqCst) {
            Self::register_exit_handler();
        }
    }
}

impl Drop for BackgroundWorker {
    fn drop(&mut self) {
        let mut live = LIVE_WORKERS.lock().unwrap_or_else(|p| p.into_inner());
        *live = live.saturating_sub(1);
        WORKER_LEFT.notify_all();
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // No buffer is alive (each holds the device); hand the cache back to the driver.
        let alloc = Allocator {
            raw: &*self.raw,
            stream: self.stream.handle,
        };
        if let Err(e) = self.pool.release_cached(&alloc) {
            tracing::warn!("releasing the device cache failed: {e}");
        }
    }
}

/// A handle to one GPU: its default stream, memory pool and loaded modules. Cheap to clone;
/// clones share everything. Every op of a handle runs in order on its one stream.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Device({} {}: {} {})",
            self.inner.info.platform,
            self.inner.info.ordinal,
            self.inner.info.name,
            self.inner.info.arch
        )
    }
}

/// The pool's view of a device.
struct Allocator<'a> {
    raw: &'a dyn RawDevice,
    stream: Handle,
}

impl RawAllocator for Allocator<'_> {
    fn raw_alloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure> {
        self.raw.malloc(bytes)
    }
    fn raw_free(&self, ptr: DevicePtr) -> Result<()> {
        self.raw.free(ptr)
    }
    fn quiesce(&self) -> Result<()> {
        self.raw.stream_synchronize(self.stream)
    }
    fn mem_info(&self) -> Result<(usize, usize)> {
        self.raw.mem_info()
    }
    fn describe(&self) -> (Platform, usize) {
        (self.raw.platform(), self.raw.ordinal())
    }
}

impl Device {
    /// Opens device `ordinal` of the selected platform with the process's configuration
    /// ([`Config::global`]: the environment, read once).
    pub fn new(ordinal: usize) -> Result<Self> {
        Self::with_config(ordinal, Config::global()?.clone())
    }

    /// Opens device `ordinal` with `config` (its platform, or the one found, and every
    /// option the runtime and the op crates read).
    pub fn with_config(ordinal: usize, config: Config) -> Result<Self> {
        let platform = platform::platform_of(&config)?;
        Self::open(platform, ordinal, config)
    }

    /// Opens device `ordinal` of `platform` with the process's other options.
    pub fn with_platform(platform: Platform, ordinal: usize) -> Result<Self> {
        Self::open(platform, ordinal, Config::global_options().clone())
    }

    fn open(platform: Platform, ordinal: usize, config: Config) -> Result<Self> {
        if config.wave64_emulation && platform != Platform::Nvidia {
            return Err(Error::NoDevice {
                platform,
                detail: "CANDLE_ROCM_WAVE64_EMULATION=1 emulates 64-lane wavefronts on the nvidia \
                         platform only (amd wavefronts are real)"
                    .into(),
            });
        }
        let raw: Arc<dyn RawDevice> = Arc::from(platform.open(ordinal)?);
        let p = raw.props();
        let mut info = DeviceInfo {
            ordinal,
            platform,
            name: p.name.clone(),
            arch: p.arch.clone(),
            warp_size: p.warp_size,
            multiprocessor_count: p.multiprocessor_count,
            shared_mem_per_block: p.shared_mem_per_block,
            max_threads_per_block: p.max_threads_per_block,
            total_memory: p.total_memory,
        };
        if config.wave64_emulation {
            // compat.h's emulated wavefronts: 64 lanes, at most WAVE64_MAX_WAVES of them a
            // block, and their exchange slots (8 bytes a lane) out of the shared memory.
            info.warp_size = 64;
            info.max_threads_per_block = info.max_threads_per_block.min(64 * WAVE64_MAX_WAVES);
            info.shared_mem_per_block = info
                .shared_mem_per_block
                .saturating_sub(WAVE64_MAX_WAVES as usize * 64 * 8);
        }
        let stream = Stream {
            handle: raw.stream_create()?,
            raw: raw.clone(),
        };
        tracing::debug!(%platform, ordinal, name = %info.name, arch = %info.arch, "device opened");
        Ok(Device {
            inner: Arc::new(DeviceInner {
                raw,
                info,
                stream,
                pool: Pool::new(config.pool_max_cached_bytes),
                modules: Mutex::default(),
                kernels: Mutex::default(),
                compile_stats: Mutex::default(),
                memory_hits: AtomicU64::new(0),
                cache_dir: config.kernel_cache_dir.clone(),
                compiler_version: OnceLock::new(),
                compiles: Mutex::default(),
                prefetched: Mutex::default(),
                progress: CompileProgress::default(),
                config,
            }),
        })
    }

    /// The configuration this handle was opened with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// A number that tells device handles apart (clones share it).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    /// Whether two handles are the same (clones of one handle).
    pub fn same_device(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// (free, total) device memory in bytes, as the driver reports it.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.inner.raw.mem_info()
    }

    /// The default stream every op of this handle runs on.
    pub fn stream(&self) -> &Stream {
        &self.inner.stream
    }

    /// Waits for all queued work; reports any asynchronous fault.
    pub fn synchronize(&self) -> Result<()> {
        if self.inner.pool.is_capturing() {
            return Err(Error::Capture(
                "synchronize (or a copy to the host) inside a captured closure: the work is \
                 recorded, not run, so there is nothing to wait for"
                    .into(),
            ));
        }
        self.inner.stream.synchronize()
    }

    /// Records the work `f` queues on this device into a [`Graph`] instead of running it,
    /// and returns the graph with `f`'s result; `graph.replay()` then runs all of it with
    /// one launch, on the same buffers. Nothing runs during the capture: tensors `f` returns
    /// hold their values only after a replay.
    ///
    /// Rules, as for HIP and CUDA stream capture:
    /// - `f` must not wait for the device (a copy to the host, `synchronize`): that is an
    ///   error, and the capture fails.
    /// - Every buffer the work reads or writes must outlive the graph. Buffers allocated
    ///   inside `f` are the graph's own: the pool keeps them for its replays until the
    ///   graph is dropped, even when `f`'s tensors are dropped first.
    /// - Kernel arguments (shapes, offsets, scalars) are fixed at capture; values that
    ///   change between replays must live in device buffers that are rewritten in place.
    /// - Run `f` once without capture first, so its kernels are loaded and the pool holds
    ///   blocks of the right sizes (a capture that must ask the driver for memory still
    ///   works, at the cost of a driver allocation).
    /// - One capture at a time per device, and no other thread may use the device during
    ///   it: its work would be recorded too.
    pub fn capture<T, E: From<Error>>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<(Graph, T), E> {
        let arena =
            self.inner.pool.begin_capture().ok_or_else(|| {
                Error::Capture("a capture is already running on this device".into())
            })?;
        let _span = tracing::debug_span!("capture", arena).entered();
        let stream = self.inner.stream.handle;
        if let Err(e) = self.inner.raw.begin_capture(stream) {
            self.inner.pool.end_capture();
            self.inner.pool.release_graph(arena);
            return Err(e.into());
        }
        let out = f();
        // The capture must end whatever `f` did, or the stream stays unusable.
        let ended = self.inner.raw.end_capture(stream);
        self.inner.pool.end_capture();
        let built = ended.and_then(|graph| match self.inner.raw.graph_instantiate(graph) {
            Ok(exec) => Ok((graph, exec)),
            Err(e) => {
                let _ = self.inner.raw.graph_destroy(graph);
                Err(e)
            }
        });
        match (out, built) {
            (Ok(value), Ok((graph, exec))) => Ok((
                Graph {
                    device: self.clone(),
                    graph,
                    exec,
                    arena,
                },
                value,
            )),
            (Err(e), built) => {
                if let Ok((graph, exec)) = built {
                    let _ = self.inner.raw.graph_exec_destroy(exec);
                    let _ = self.inner.raw.graph_destroy(graph);
                }
                self.inner.pool.release_graph(arena);
                Err(e)
            }
            (Ok(_), Err(e)) => {
                self.inner.pool.release_graph(arena);
                Err(
                    Error::Capture(format!("the captured work could not become a graph: {e}"))
                        .into(),
                )
            }
        }
    }

    /// Host copies wait for the device, which a capture cannot do.
    fn refuse_under_capture(&self, op: &'static str) -> Result<()> {
        if self.inner.pool.is_capturing() {
            return Err(Error::Capture(format!(
                "{op} inside a captured closure: host copies wait for the device; make the \
                 data a device buffer before the capture, or copy after a replay"
            )));
        }
        Ok(())
    }

    /// Whether a [`Device::capture`] is recording this device's work.
    pub fn is_capturing(&self) -> bool {
        self.inner.pool.is_capturing()
    }

    fn allocator(&self) -> Allocator<'_> {
        Allocator {
            raw: &*self.inner.raw,
            stream: self.inner.stream.handle,
        }
    }

    /// Pool counters.
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.pool.stats()
    }

    /// Returns every cached block to the driver; the bytes released.
    pub fn empty_cache(&self) -> Result<usize> {
        self.inner.pool.release_cached(&self.allocator())
    }

    /// An uninitialised buffer of `bytes` bytes (zero bytes: no allocation).
    pub fn alloc(&self, bytes: usize) -> Result<Buffer> {
        let block = if bytes == 0 {
            None
        } else {
            Some(self.inner.pool.alloc(&self.allocator(), bytes)?)
        };
        Ok(Buffer {
            device: self.clone(),
            block,
            len: bytes,
        })
    }

    /// A buffer of `bytes` zero bytes.
    pub fn alloc_zeroed(&self, bytes: usize) -> Result<Buffer> {
        let buf = self.alloc(bytes)?;
        self.memset(&buf, 0, bytes, 0)?;
        Ok(buf)
    }

    /// An uninitialised buffer of `len` elements of `T`.
    pub fn alloc_typed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = byte_len::<T>(len)?;
        Ok(DeviceBuffer {
            buf: self.alloc(bytes)?,
            len,
            _t: PhantomData,
        })
    }

    /// `len` zero elements of `T`.
    pub fn alloc_zeroed_typed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = byte_len::<T>(len)?;
        Ok(DeviceBuffer {
            buf: self.alloc_zeroed(bytes)?,
            len,
            _t: PhantomData,
        })
    }

    /// Uploads `data` into a new buffer.
    pub fn htod<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc_typed::<T>(data.len())?;
        self.copy_htod(bytemuck::cast_slice(data), buf.as_buffer(), 0)?;
        Ok(buf)
    }

    /// Downloads a whole typed buffer.
    pub fn dtoh<T: DeviceRepr>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); src.len];
        self.copy_dtoh(src.as_buffer(), 0, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    fn check_own(&self, op: &'static str, buf: &Buffer) -> Result<()> {
        if buf.device.same_device(self) {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                op,
                left: format!("{self:?}"),
                right: format!("{:?}", buf.device),
            })
        }
    }

    fn check_range(op: &'static str, buf: &Buffer, offset: usize, bytes: usize) -> Result<()> {
        match offset.checked_add(bytes) {
            Some(end) if end <= buf.len => Ok(()),
            _ => Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "{bytes} bytes at offset {offset} of a {}-byte buffer",
                    buf.len
                ),
            }),
        }
    }

    /// Host bytes into `dst` at `dst_offset`; returns once `src` may be reused.
    pub fn copy_htod(&self, src: &[u8], dst: &Buffer, dst_offset: usize) -> Result<()> {
        self.refuse_under_capture("copy_htod")?;
        self.check_own("copy_htod", dst)?;
        Self::check_range("copy_htod", dst, dst_offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner.raw.memcpy_htod(
            dst.device_ptr() + dst_offset as u64,
            src,
            self.inner.stream.handle,
        )
    }

    /// `dst.len()` bytes of `src` from `src_offset` to the host, after all queued work.
    pub fn copy_dtoh(&self, src: &Buffer, src_offset: usize, dst: &mut [u8]) -> Result<()> {
        self.refuse_under_capture("copy_dtoh")?;
        self.check_own("copy_dtoh", src)?;
        Self::check_range("copy_dtoh", src, src_offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.inner.raw.memcpy_dtoh(
            dst,
            src.device_ptr() + src_offset as u64,
            self.inner.stream.handle,
        )
    }

    /// `bytes` bytes between two buffers of this device (queued on the stream).
    pub fn copy_dtod(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        self.check_own("copy_dtod", src)?;
        self.check_own("copy_dtod", dst)?;
        Self::check_range("copy_dtod", src, src_offset, bytes)?;
        Self::check_range("copy_dtod", dst, dst_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.inner.raw.memcpy_dtod(
            dst.device_ptr() + dst_offset as u64,
            src.device_ptr() + src_offset as u64,
            bytes,
            self.inner.stream.handle,
        )
    }

    /// Sets `bytes` bytes of `dst` from `offset` to `value` (queued on the stream).
    pub fn memset(&self, dst: &Buffer, offset: usize, bytes: usize, value: u8) -> Result<()> {
        self.check_own("memset", dst)?;
        Self::check_range("memset", dst, offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.inner.raw.memset_d8(
            dst.device_ptr() + offset as u64,
            value,
            bytes,
            self.inner.stream.handle,
        )
    }

    /// A new event for timing or waiting on this device's stream.
    pub fn create_event(&self) -> Result<Event> {
        Ok(Event {
            handle: self.inner.raw.event_create()?,
            raw: self.inner.raw.clone(),
        })
    }

    /// The kernel compiler's version string (cached).
    pub fn compiler_version(&self) -> Result<String> {
        if let Some(v) = self.inner.compiler_version.get() {
            return Ok(v.clone());
        }
        let v = self.inner.info.platform.compiler_version()?;
        Ok(self.inner.compiler_version.get_or_init(|| v).clone())
    }

    /// The loaded module for a kernel family, compiling it on first use.
    pub fn load_module(&self, module: &rocm_kernels::KernelModule) -> Result<Arc<Module>> {
        if let Some(m) = self.cached_module(module.name) {
            return Ok(m);
        }
        self.load_source(module.name, &module.full_source())
    }

    fn cached_module(&self, name: &str) -> Option<Arc<Module>> {
        let found = self
            .inner
            .modules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        if found.is_some() {
            self.inner.memory_hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Compiles (or loads from the disk cache) and loads a full translation unit under
    /// `name`. The source must include the prelude (`rocm_kernels::prelude()`) if it uses it.
    /// A second call with the same name returns the first module.
    pub fn load_source(&self, name: &str, source: &str) -> Result<Arc<Module>> {
        if let Some(m) = self.cached_module(name) {
            return Ok(m);
        }
        let image = self.compiled_image(name, source, false)?;
        self.load_image(name, &image)
    }

    /// The compiler options of this handle's modules: the platform's, and the emulated
    /// wavefronts' define when they are on.
    pub fn compile_options(&self) -> Vec<String> {
        let info = &self.inner.info;
        let mut options = info.platform.base_compile_options(&info.arch);
        if self.inner.config.wave64_emulation {
            options.push("-DCANDLE_ROCM_WAVE64_EMULATION".into());
        }
        options
    }

    /// Loads a compiled image under `name` (the first of two racing loads wins); the image
    /// itself is not kept once the module is loaded.
    fn load_image(&self, name: &str, image: &[u8]) -> Result<Arc<Module>> {
        let started = std::time::Instant::now();
        let handle = self.inner.raw.module_load(image)?;
        let module = Arc::new(Module {
            name: name.to_string(),
            handle,
            raw: self.inner.raw.clone(),
            functions: Mutex::default(),
        });
        self.inner
            .compile_stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .module_load_time += started.elapsed();
        let loaded = {
            let mut modules = self.inner.modules.lock().unwrap_or_else(|p| p.into_inner());
            // Two threads may have loaded the same module; keep the first, drop ours.
            modules.entry(name.to_string()).or_insert(module).clone()
        };
        self.inner
            .compiles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        Ok(loaded)
    }

    /// The image of the translation unit `source` named `name`: compiled (or read from the
    /// disk cache) once per handle, whichever thread asks first; the others wait for it.
    /// `counted`: the caller already counted this module in the compile progress.
    fn compiled_image(&self, name: &str, source: &str, counted: bool) -> Result<Arc<Vec<u8>>> {
        let slot = self
            .inner
            .compiles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone();
        let mut image = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(done) = &*image {
            if counted {
                self.inner.progress.finish(&self.inner.info.arch, name);
            }
            return Ok(done.clone());
        }
        if !counted {
            self.inner.progress.add(1);
        }
        let info = &self.inner.info;
        let compiled = self.compiler_version().and_then(|compiler_version| {
            let req = CompileRequest {
                platform: info.platform,
                module: name,
                source,
                arch: &info.arch,
                options: self.compile_options(),
                compiler_version,
            };
            compile::compile_cached(&req, self.inner.cache_dir.as_deref())
        });
        self.inner.progress.finish(&info.arch, name);
        let compiled = compiled?;
        {
            let mut st = self
                .inner
                .compile_stats
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match compiled.origin {
                Origin::Compiled => {
                    st.compiled += 1;
                    st.compile_time += compiled.elapsed;
                    BackgroundWorker::after_compile();
                }
                Origin::DiskCache => {
                    st.disk_hits += 1;
                    st.disk_load_time += compiled.elapsed;
                }
            }
        }
        let done = Arc::new(compiled.image);
        *image = Some(done.clone());
        Ok(done)
    }

    /// Compiles and loads the one-key variants `wanted` ((module, dtype or width key) pairs,
    /// as [`Device::kernel`] names them) at once, on up to `Config::compile_threads` threads:
    /// a warm-up before the first forward pass. Returns the first error.
    pub fn prepare(
        &self,
        wanted: &[(&'static rocm_kernels::KernelModule, &'static str)],
    ) -> Result<()> {
        let todo: Vec<(String, &'static rocm_kernels::KernelModule, &'static str)> = wanted
            .iter()
            .filter(|(m, k)| m.filter_keys().contains(k))
            .map(|&(m, k)| (m.name_for_dtype(k), m, k))
            .filter(|(name, _, _)| self.cached_module(name).is_none())
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        self.inner.progress.add(todo.len());
        let next = AtomicUsize::new(0);
        let threads = self.inner.config.compile_threads.clamp(1, todo.len());
        let images: Vec<Result<Arc<Vec<u8>>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some((name, m, k)) = todo.get(i) else {
                                break mine;
                            };
                            mine.push((i, self.compiled_image(name, &m.source_for_dtype(k), true)));
                        }
                    })
                })
                .collect();
            let mut all: Vec<(usize, Result<Arc<Vec<u8>>>)> = workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect();
            all.sort_by_key(|(i, _)| *i);
            all.into_iter().map(|(_, r)| r).collect()
        });
        if images.len() != todo.len() {
            return Err(Error::InvalidLaunch {
                function: "prepare".into(),
                reason: "a compile thread panicked".into(),
            });
        }
        for ((name, _, _), image) in todo.iter().zip(images) {
            self.load_image(name, &image?)?;
        }
        Ok(())
    }

    /// Every module variant of the keys `keys` (dtype names such as `f32`, or GGUF type keys
    /// such as `q4k`) compiled and loaded at once: [`Device::prepare`] over the whole table.
    pub fn prepare_keys(&self, keys: &[&'static str]) -> Result<()> {
        let wanted: Vec<_> = rocm_kernels::ALL_MODULES
            .iter()
            .flat_map(|&m| keys.iter().map(move |&k| (m, k)))
            .collect();
        self.prepare(&wanted)
    }

    /// Queues the [`PREFETCH_MODULES`] variants of `key` on background threads, once per key
    /// and handle (none with `Config::compile_threads` 0).
    fn prefetch(&self, key: &'static str, asked: &'static rocm_kernels::KernelModule) {
        if self.inner.config.compile_threads == 0
            || !self
                .inner
                .prefetched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key)
        {
            return;
        }
        // Byte-moving modules (indexing) are keyed by width: a dtype's elements and the
        // 16-byte units its contiguous runs travel in.
        let widths: Vec<&'static str> = crate::DType::ALL
            .iter()
            .find(|d| d.as_str() == key)
            .and_then(|d| rocm_kernels::width_key(d.size_in_bytes()))
            .into_iter()
            .chain(rocm_kernels::width_key(16))
            .collect();
        let todo: Vec<(&'static rocm_kernels::KernelModule, &'static str)> =
            rocm_kernels::ALL_MODULES
                .iter()
                .copied()
                .filter(|m| PREFETCH_MODULES.contains(&m.name))
                .flat_map(|m| {
                    let keys = m.filter_keys();
                    std::iter::once(key)
                        .chain(widths.iter().copied())
                        .filter(move |k| keys.contains(k))
                        .map(move |k| (m, k))
                })
                .filter(|&(m, k)| !(m.name == asked.name && k == key))
                .collect();
        self.compile_in_background(&todo);
    }

    /// Starts compiling the module variants `wanted` ((module, key) pairs) on background
    /// threads and returns at once; the first launch that needs one waits for its compile
    /// instead of starting another. For callers that know what comes next (a GGUF file's block
    /// types once its tensors load). Nothing starts with `Config::compile_threads` 0; a
    /// background compile that fails is left for the thread that needs the module to retry
    /// and report.
    pub fn compile_in_background(
        &self,
        wanted: &[(&'static rocm_kernels::KernelModule, &'static str)],
    ) {
        let threads = self.inner.config.compile_threads;
        let todo: Vec<_> = wanted
            .iter()
            .copied()
            .filter(|(m, key)| m.filter_keys().contains(key))
            .filter(|(m, key)| {
                let name = m.name_for_dtype(key);
                self.cached_module(&name).is_none()
                    && !self
                        .inner
                        .compiles
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains_key(&name)
            })
            .collect();
        if threads == 0 || todo.is_empty() {
            return;
        }
        BackgroundWorker::wait_at_exit();
        self.inner.progress.add(todo.len());
        let queue = Arc::new(Mutex::new(todo));
        // The asking thread compiles what it needs meanwhile: leave it a core.
        let workers = threads
            .saturating_sub(1)
            .max(1)
            .min(queue.lock().map_or(1, |q| q.len()));
        for _ in 0..workers {
            let Some(worker) = BackgroundWorker::enlist() else {
                return;
            };
            let (device, queue) = (self.clone(), queue.clone());
            let spawned = std::thread::Builder::new()
                .name("candle-rocm-compile".into())
                .spawn(move || {
                    {
                        let (device, queue) = (device, queue);
                        // the queue's lock is held for the pop only, not the compile
                        let next = || queue.lock().ok().and_then(|mut q| q.pop());
                        while !BackgroundWorker::exiting() {
                            let Some((m, key)) = next() else { break };
                            let name = m.name_for_dtype(key);
                            if device.cached_module(&name).is_some() {
                                // loaded meanwhile by a thread that needed it
                                device.inner.progress.finish(&device.inner.info.arch, &name);
                                continue;
                            }
                            let source = m.source_for_dtype(key);
                            if let Err(e) = device.compiled_image(&name, &source, true) {
                                tracing::warn!(module = %name, "background compile failed: {e}");
                            }
                        }
                    }
                    // the device handle is gone: the worker may leave
                    drop(worker);
                });
            match spawned {
                Ok(thread) => {
                    let mut threads = WORKER_THREADS.lock().unwrap_or_else(|p| p.into_inner());
                    threads.retain(|t| !t.is_finished());
                    threads.push(thread);
                }
                Err(e) => tracing::warn!("no background compile thread: {e}"),
            }
        }
    }

    /// The kernel `op` of `module` for `key` (a dtype name or a width key, as the table lists
    /// it), from the part of the module built for that key alone
    /// (`KernelModule::source_for_dtype`), so a program compiles only what it uses. Resolved
    /// once per handle; later calls take one lock and no allocation.
    pub fn kernel(
        &self,
        module: &'static rocm_kernels::KernelModule,
        op: &'static str,
        key: &'static str,
    ) -> Result<Function> {
        let id = (module.name, op, key);
        if let Some(f) = self
            .inner
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            return Ok(f.clone());
        }
        let entry = module
            .entry_point(op, key)
            .ok_or_else(|| Error::FunctionNotFound {
                module: module.name.to_string(),
                function: format!("{op} for {key}"),
            })?;
        let name = module.name_for_dtype(key);
        let loaded = match self.cached_module(&name) {
            Some(m) => m,
            None => {
                // The first module of this key: its usual companions start compiling too.
                self.prefetch(key, module);
                self.load_source(&name, &module.source_for_dtype(key))?
            }
        };
        let function = loaded.function(&entry)?;
        self.inner
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, function.clone());
        Ok(function)
    }

    /// Makes this device current on the calling thread, for vendor libraries (rocBLAS,
    /// cuBLAS, MIOpen) that work on the thread's current device.
    pub fn bind_to_thread(&self) -> Result<()> {
        self.inner.raw.bind_thread()
    }

    /// The device's stream as the platform's handle (`hipStream_t` / `CUstream`), for vendor
    /// libraries that must queue their work behind ours.
    pub fn raw_stream(&self) -> *mut std::ffi::c_void {
        self.inner.stream.handle as *mut std::ffi::c_void
    }

    /// Module compile/load counters and times.
    pub fn compile_stats(&self) -> CompileStats {
        let mut st = *self
            .inner
            .compile_stats
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        st.memory_hits = self.inner.memory_hits.load(Ordering::Relaxed);
        st
    }

    /// Queues the kernel `op` of `module` for `key` as a grid-stride launch over `n` items
    /// (`LaunchConfig::for_elements`).
    pub fn launch_elements(
        &self,
        (module, op, key): (
            &'static rocm_kernels::KernelModule,
            &'static str,
            &'static str,
        ),
        n: u64,
        args: &mut LaunchArgs,
    ) -> Result<()> {
        let function = self.kernel(module, op, key)?;
        self.launch(
            &function,
            LaunchConfig::for_elements(n, &self.inner.info),
            args,
        )
    }

    /// Queues `function` on the stream. Buffers named in `args` must belong to this handle.
    pub fn launch(
        &self,
        function: &Function,
        config: LaunchConfig,
        args: &mut LaunchArgs,
    ) -> Result<()> {
        if !Arc::ptr_eq(&function.module.raw, &self.inner.raw) {
            return Err(Error::DeviceMismatch {
                op: "launch",
                left: format!("{self:?}"),
                right: format!("module `{}` of another device", function.module.name),
            });
        }
        if args.overflowed() {
            return Err(Error::InvalidLaunch {
                function: function.name.to_string(),
                reason: format!(
                    "more than {} bytes or {} arguments",
                    crate::launch::MAX_WORDS * 8,
                    crate::launch::MAX_ARGS
                ),
            });
        }
        if let Some(other) = args.devices().iter().find(|&&d| d != self.id()) {
            return Err(Error::DeviceMismatch {
                op: "launch",
                left: format!("{self:?}"),
                right: format!("a buffer of device handle {other:#x}"),
            });
        }
        config.validate(&function.name, &self.inner.info)?;
        let _span = tracing::debug_span!("launch", function = %function.name, grid = ?config.grid, block = ?config.block).entered();
        let mut params = args.param_ptrs();
        self.inner.raw.launch(
            function.handle,
            config.grid,
            config.block,
            config.shared_mem_bytes,
            self.inner.stream.handle,
            &mut params[..args.len()],
        )?;
        if self.inner.config.sync_launch && !self.inner.pool.is_capturing() {
            self.synchronize()?;
        }
        Ok(())
    }
}

/// Work recorded by [`Device::capture`], replayed with one launch per [`Graph::replay`].
/// Dropping it returns the blocks it kept to the pool.
pub struct Graph {
    device: Device,
    graph: Handle,
    exec: Handle,
    arena: u64,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Graph({:#x} on {:?})", self.exec, self.device)
    }
}

impl Graph {
    /// Queues one run of the recorded work on the device's stream, after what is queued.
    pub fn replay(&self) -> Result<()> {
        if self.device.is_capturing() {
            return Err(Error::Capture("replaying a graph inside a capture".into()));
        }
        let _span = tracing::debug_span!("replay", graph = self.exec).entered();
        self.device
            .inner
            .raw
            .graph_launch(self.exec, self.device.inner.stream.handle)?;
        if self.device.inner.config.sync_launch {
            self.device.synchronize()?;
        }
        Ok(())
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // Replays already queued run before anything that reuses the arena (one stream).
        let raw = &self.device.inner.raw;
        if let Err(e) = raw
            .graph_exec_destroy(self.exec)
            .and_then(|()| raw.graph_destroy(self.graph))
        {
            tracing::warn!("destroying a graph failed: {e}");
        }
        self.device.inner.pool.release_graph(self.arena);
    }
}

fn byte_len<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::SizeMismatch {
            op: "alloc",
            detail: format!(
                "{len} elements of {} bytes overflow",
                std::mem::size_of::<T>()
            ),
        })
}

/// Plain-data element types a typed buffer may hold.
pub trait DeviceRepr: bytemuck::Pod + Send + Sync + 'static {}
macro_rules! device_repr {
    ($($t:ty),*) => { $(impl DeviceRepr for $t {})* };
}
device_repr!(
    u8,
    u16,
    u32,
    u64,
    i8,
    i16,
    i32,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);

/// Device memory from the pool; goes back to the pool on drop.
pub struct Buffer {
    device: Device,
    block: Option<Block>,
    len: usize,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({} bytes at {:#x} on {:?})",
            self.len,
            self.device_ptr(),
            self.device
        )
    }
}

impl Buffer {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The device address (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.block.map_or(0, |b| b.ptr)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.device.inner.pool.free(&self.device.allocator(), block);
        }
    }
}

/// A buffer of `len` elements of `T`.
pub struct DeviceBuffer<T> {
    buf: Buffer,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] {:?}",
            std::any::type_name::<T>(),
            self.len,
            self.buf
        )
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Element count.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_buffer(&self) -> &Buffer {
        &self.buf
    }
    pub fn into_buffer(self) -> Buffer {
        self.buf
    }
    pub fn device(&self) -> &Device {
        &self.buf.device
    }
}

/// A stream of the device: work on it runs in order.
pub struct Stream {
    raw: Arc<dyn RawDevice>,
    handle: Handle,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({:#x})", self.handle)
    }
}

impl Stream {
    /// Waits for everything queued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.raw.stream_synchronize(self.handle)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let done = self
            .raw
            .stream_synchronize(self.handle)
            .and_then(|()| self.raw.stream_destroy(self.handle));
        if let Err(e) = done {
            tracing::warn!("destroying a stream failed: {e}");
        }
    }
}

/// A point in a stream, for timing and waiting.
pub struct Event {
    raw: Arc<dyn RawDevice>,
    handle: Handle,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({:#x})", self.handle)
    }
}

impl Event {
    /// Marks the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.raw.event_record(self.handle, stream.handle)
    }
    /// Waits until the recorded point is reached.
    pub fn synchronize(&self) -> Result<()> {
        self.raw.event_synchronize(self.handle)
    }
    /// Whether the recorded point has been reached, without waiting (a fault of the work
    /// before it is an error).
    pub fn query(&self) -> Result<bool> {
        self.raw.event_query(self.handle)
    }
    /// Milliseconds from `self` to `end` (both recorded and reached).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.raw.event_elapsed_ms(self.handle, end.handle)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Err(e) = self.raw.event_destroy(self.handle) {
            tracing::warn!("destroying an event failed: {e}");
        }
    }
}

/// A loaded code object.
pub struct Module {
    name: String,
    handle: Handle,
    raw: Arc<dyn RawDevice>,
    functions: Mutex<HashMap<String, Handle>>,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Module({})", self.name)
    }
}

impl Module {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel `entry`, or an error naming it and this module.
    pub fn function(self: &Arc<Self>, entry: &str) -> Result<Function> {
        let mut table = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        let handle = match table.get(entry) {
            Some(&h) => h,
            None => {
                let h = self
                    .raw
                    .module_function(self.handle, entry)?
                    .ok_or_else(|| Error::FunctionNotFound {
                        module: self.name.clone(),
                        function: entry.to_string(),
                    })?;
                table.insert(entry.to_string(), h);
                h
            }
        };
        Ok(Function {
            module: self.clone(),
            handle,
            name: entry.into(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if let Err(e) = self.raw.module_unload(self.handle) {
            tracing::warn!(module = %self.name, "unloading a module failed: {e}");
        }
    }
}

/// A kernel entry point; keeps its module loaded. Cloning it allocates nothing.
#[derive(Clone)]
pub struct Function {
    module: Arc<Module>,
    handle: Handle,
    name: Arc<str>,
}

impl fmt::Debug for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Function({}::{})", self.module.name, self.name)
    }
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }
}
