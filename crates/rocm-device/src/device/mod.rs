//! A device: its handle, configuration, default stream and launches. Memory (`memory`),
//! graph capture (`graph`), the default stream and events (`stream`) and the kernel modules,
//! their compiles and background workers (`jit`) live beside it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use crate::compile::CompileProgress;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::launch::{LaunchArgs, LaunchConfig};
pub use crate::platform::DeviceInfo;
use crate::platform::{self, Platform, RawDevice};
use crate::pool::Pool;

mod graph;
mod jit;
mod memory;
mod staging;
mod stream;
mod tickets;

pub use graph::Graph;
pub use jit::{Companions, WAVE64_MAX_WAVES};
use jit::{CompileSlot, KernelKey, KeyHasher};
pub use jit::{CompileStats, Function, Module};
use memory::Allocator;
pub use memory::{Buffer, DeviceBuffer, DeviceRepr};
pub use stream::{Event, Stream};
use tickets::TicketStore;
pub use tickets::Tickets;

struct DeviceInner {
    raw: Arc<dyn RawDevice>,
    info: DeviceInfo,
    config: Config,
    /// Dropped before the stream: its buffers wait for their last copies.
    staging: Mutex<staging::Staging>,
    stream: Stream,
    pool: Pool,
    modules: Mutex<HashMap<String, Arc<Module>>>,
    /// Resolved kernels: the one lock a launch of a known kernel takes.
    kernels: Mutex<HashMap<KernelKey, Function, KeyHasher>>,
    /// The driver's occupancy answers by kernel, block threads and dynamic shared memory
    /// (fixed once a kernel is compiled; asked before launches that size their grid by it).
    occupancy: Mutex<HashMap<(KernelKey, u32, u32), u32, KeyHasher>>,
    compile_stats: Mutex<CompileStats>,
    memory_hits: AtomicU64,
    cache_dir: Option<PathBuf>,
    compiler_version: OnceLock<String>,
    /// Images compiled and not yet loaded, by module name, each compiled once however many
    /// threads want it.
    compiles: Mutex<HashMap<String, CompileSlot>>,
    /// Keys whose common modules went to the background compilers.
    prefetched: Mutex<HashSet<&'static str>>,
    /// What to compile in the background when a key's first kernel is needed (none unset).
    companions: OnceLock<Companions>,
    progress: CompileProgress,
    tickets: Mutex<TicketStore>,
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // No buffer is alive (each holds the device); hand the cache back to the driver.
        let alloc = Allocator {
            raw: &*self.raw,
            stream: self.stream.handle,
        };
        let tickets = self
            .tickets
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        for block in tickets {
            self.pool.free(&alloc, block);
        }
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
        let mut info = raw.props().clone();
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
                occupancy: Mutex::default(),
                compile_stats: Mutex::default(),
                memory_hits: AtomicU64::new(0),
                cache_dir: config.kernel_cache_dir.clone(),
                compiler_version: OnceLock::new(),
                compiles: Mutex::default(),
                prefetched: Mutex::default(),
                companions: OnceLock::new(),
                progress: CompileProgress::default(),
                tickets: Mutex::default(),
                staging: Mutex::default(),
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

    /// A new event for timing or waiting on this device's stream.
    pub fn create_event(&self) -> Result<Event> {
        Ok(Event {
            handle: self.inner.raw.event_create()?,
            raw: self.inner.raw.clone(),
        })
    }

    /// Makes this device current on the calling thread, for vendor libraries (rocBLAS,
    /// cuBLAS, MIOpen) that work on the thread's current device.
    pub fn bind_to_thread(&self) -> Result<()> {
        self.inner.raw.bind_thread()
    }

    /// The device's stream as the platform's handle (`hipStream_t` / `CUstream`), for vendor
    /// libraries that must queue their work behind ours.
    pub fn raw_stream(&self) -> *mut std::ffi::c_void {
        self.inner.stream.handle.0 as *mut std::ffi::c_void
    }

    /// Queues the kernel `op` of `module` for `key` as a grid-stride launch over `n` items
    /// (`LaunchConfig::for_elements`).
    pub fn launch_elements(
        &self,
        (module, op, key): (
            &'static crate::kernel::KernelModule,
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

    /// Queues `entry`'s kernel for `key` (a dtype or width) with `params`, the parameter list
    /// the entry's kernel is declared with.
    pub fn launch_entry<P: crate::kernel::KernelParams>(
        &self,
        entry: crate::kernel::Entry<P>,
        key: &'static str,
        config: LaunchConfig,
        params: &P,
    ) -> Result<()> {
        let function = self.kernel(entry.module, entry.op, key)?;
        self.launch(&function, config, &mut LaunchArgs::from_params(params))
    }

    /// Blocks of `entry` (for `key`) one multiprocessor or compute unit holds at once with
    /// blocks of `block_threads` threads and `shared_mem_bytes` of dynamic shared memory: the
    /// driver's answer from the compiled kernel's registers and shared memory, for sizing a grid
    /// to whole waves. Compiles the kernel where it is not yet loaded; asked of the driver once.
    pub fn max_active_blocks<P: crate::kernel::KernelParams>(
        &self,
        entry: crate::kernel::Entry<P>,
        key: &'static str,
        block_threads: u32,
        shared_mem_bytes: u32,
    ) -> Result<u32> {
        let id = (
            (entry.module.name, entry.op, key),
            block_threads,
            shared_mem_bytes,
        );
        let answers = || {
            self.inner
                .occupancy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
        };
        if let Some(&blocks) = answers().get(&id) {
            return Ok(blocks);
        }
        let function = self.kernel(entry.module, entry.op, key)?;
        let blocks =
            self.inner
                .raw
                .max_active_blocks(function.handle, block_threads, shared_mem_bytes)?;
        answers().insert(id, blocks);
        Ok(blocks)
    }

    /// [`Device::launch_entry`] grid-stride over `n` elements (the elementwise kernels'
    /// configuration, as [`Device::launch_elements`]).
    pub fn launch_entry_elements<P: crate::kernel::KernelParams>(
        &self,
        entry: crate::kernel::Entry<P>,
        key: &'static str,
        n: u64,
        params: &P,
    ) -> Result<()> {
        let config = LaunchConfig::for_elements(n, &self.inner.info);
        self.launch_entry(entry, key, config, params)
    }

    /// Queues `function` on the stream. Buffers named in `args` must belong to this handle.
    pub fn launch(
        &self,
        function: &Function,
        config: LaunchConfig,
        args: &mut LaunchArgs,
    ) -> Result<()> {
        let _host = crate::host_time::span("rocm-device: launch");
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
        let _driver = crate::host_time::span("driver: launch");
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
