//! Kernel modules: loading, the compiles behind them (NVRTC / hiprtc, the disk cache), the
//! background workers that compile ahead, and kernel lookup.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::compile::{self, CompileRequest, Origin};
use crate::error::{Error, Result};
use crate::kernel::KernelModule;
use crate::platform::{FunctionHandle, ModuleHandle};

use super::*;

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
pub(crate) type KernelKey = (&'static str, &'static str, &'static str);

/// The kernel map's hasher: the keys are a few short table strings looked up on every
/// launch, where SipHash's flood resistance buys nothing (multiply-rotate, as rustc's Fx).
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher;

impl std::hash::BuildHasher for KeyHasher {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

pub(crate) struct FxHasher(u64);

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

/// One module's image: the first thread to want it compiles (or reads the disk cache) under
/// the slot's lock; the others wait there and take the image. A failed compile leaves the
/// slot empty for the next caller to retry and report.
pub(crate) type CompileSlot = Arc<Mutex<Option<Arc<Vec<u8>>>>>;

/// Wavefronts a block may hold with emulated wave64 (CANDLE_ROCM_WAVE64_MAX_WAVES in compat.h,
/// which the kernel table's tests hold to this).
pub const WAVE64_MAX_WAVES: u32 = 8;

/// The module variants to compile in the background once a kernel of a key is first needed:
/// `(key, the key's element bytes where it names a dtype)` to `(module, key)` pairs.
pub type Companions = fn(&str, Option<usize>) -> Vec<(&'static KernelModule, &'static str)>;

/// Background compiles and process exit. A compile thread still inside NVRTC or hiprtc, or
/// still dropping its device handle, must not run while the process tears down its
/// libraries: every worker is enlisted before it is spawned and leaves only after its device
/// handle is gone; once the first background compile is queued, an `atexit` handler stops the
/// workers from taking more work, waits (at most `EXIT_WAIT`) for every enlisted one to leave,
/// and joins their threads.
pub(crate) struct BackgroundWorker;

pub(crate) static LIVE_WORKERS: Mutex<usize> = Mutex::new(0);
/// The workers' threads, joined at exit (finished ones are dropped as new ones start).
pub(crate) static WORKER_THREADS: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());
pub(crate) static WORKER_LEFT: std::sync::Condvar = std::sync::Condvar::new();
pub(crate) static EXITING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
/// Whether the exit handler has been registered (background compiles exist).
pub(crate) static REGISTERED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
/// Longer than any one module's compile.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(60);

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

impl Device {
    /// The kernel compiler's version string (cached).
    pub fn compiler_version(&self) -> Result<String> {
        if let Some(v) = self.inner.compiler_version.get() {
            return Ok(v.clone());
        }
        let v = self.inner.info.platform.compiler_version()?;
        Ok(self.inner.compiler_version.get_or_init(|| v).clone())
    }

    /// The loaded module for a kernel family, compiling it on first use.
    pub fn load_module(&self, module: &KernelModule) -> Result<Arc<Module>> {
        if let Some(m) = self.cached_module(module.name) {
            return Ok(m);
        }
        self.load_source(module.name, &module.full_source())
    }

    pub(crate) fn cached_module(&self, name: &str) -> Option<Arc<Module>> {
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
    /// `name`. The source must include the headers it uses (`KernelModule::prelude`).
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
    pub(crate) fn load_image(&self, name: &str, image: &[u8]) -> Result<Arc<Module>> {
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
    pub(crate) fn compiled_image(
        &self,
        name: &str,
        source: &str,
        counted: bool,
    ) -> Result<Arc<Vec<u8>>> {
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
    pub fn prepare(&self, wanted: &[(&'static KernelModule, &'static str)]) -> Result<()> {
        let todo: Vec<(String, &'static KernelModule, &'static str)> = wanted
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

    /// Every variant of `modules` for the keys `keys` (dtype names such as `f32`, or GGUF type
    /// keys such as `q4k`) compiled and loaded at once: [`Device::prepare`] over a table.
    pub fn prepare_keys(
        &self,
        modules: &[&'static KernelModule],
        keys: &[&'static str],
    ) -> Result<()> {
        let wanted: Vec<_> = modules
            .iter()
            .flat_map(|&m| keys.iter().map(move |&k| (m, k)))
            .collect();
        self.prepare(&wanted)
    }

    /// Sets what is compiled in the background when the first kernel of a key is needed (the
    /// kernel table's choice; nothing until it is set). The first setting holds.
    pub fn set_companions(&self, companions: Companions) {
        let _ = self.inner.companions.set(companions);
    }

    /// Queues the variants the companions name for `key` on background threads, once per key
    /// and handle (none with `Config::compile_threads` 0 or no companions set).
    pub(crate) fn prefetch(&self, key: &'static str, asked: &'static KernelModule) {
        let Some(companions) = self.inner.companions.get() else {
            return;
        };
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
        let element_bytes = crate::DType::ALL
            .iter()
            .find(|d| d.as_str() == key)
            .map(|d| d.size_in_bytes());
        let todo: Vec<(&'static KernelModule, &'static str)> = companions(key, element_bytes)
            .into_iter()
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
    pub fn compile_in_background(&self, wanted: &[(&'static KernelModule, &'static str)]) {
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
        module: &'static KernelModule,
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
}

/// A loaded code object.
pub struct Module {
    pub(crate) name: String,
    pub(crate) handle: ModuleHandle,
    pub(crate) raw: Arc<dyn RawDevice>,
    pub(crate) functions: Mutex<HashMap<String, FunctionHandle>>,
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
    pub(crate) module: Arc<Module>,
    pub(crate) handle: FunctionHandle,
    pub(crate) name: Arc<str>,
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
