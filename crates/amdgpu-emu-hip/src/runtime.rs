//! The emulated device behind the HIP entry points: its memory, loaded modules, streams,
//! events and captured graphs. Work runs when it is enqueued (each stream is in order and the
//! device runs one thing at a time, so a stream is always idle when the host looks); a stream
//! under capture records its work instead, and a graph launch replays it.

use std::collections::HashMap;
use std::time::Instant;

use amdgpu_emu::exec::{ExecError, Launch, Memory, Module, Schedule};
use amdgpu_emu::{Arch, ArgKind, CodeObject};

/// Why a call failed: the HIP error it returns and the text `hipGetErrorString` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: Code,
    pub message: String,
}

/// The HIP error codes this runtime returns (values from ROCm's `hip_runtime_api.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    InvalidValue = 1,
    OutOfMemory = 2,
    InvalidDevice = 101,
    InvalidImage = 200,
    InvalidHandle = 400,
    NotFound = 500,
    IllegalAddress = 700,
    LaunchFailure = 719,
    StreamCaptureUnsupported = 900,
}

impl Code {
    pub const fn name(self) -> &'static str {
        match self {
            Code::InvalidValue => "hipErrorInvalidValue",
            Code::OutOfMemory => "hipErrorOutOfMemory",
            Code::InvalidDevice => "hipErrorInvalidDevice",
            Code::InvalidImage => "hipErrorInvalidImage",
            Code::InvalidHandle => "hipErrorInvalidHandle",
            Code::NotFound => "hipErrorNotFound",
            Code::IllegalAddress => "hipErrorIllegalAddress",
            Code::LaunchFailure => "hipErrorLaunchFailure",
            Code::StreamCaptureUnsupported => "hipErrorStreamCaptureUnsupported",
        }
    }

    pub const ALL: [Code; 9] = [
        Code::InvalidValue,
        Code::OutOfMemory,
        Code::InvalidDevice,
        Code::InvalidImage,
        Code::InvalidHandle,
        Code::NotFound,
        Code::IllegalAddress,
        Code::LaunchFailure,
        Code::StreamCaptureUnsupported,
    ];
}

pub type Result<T> = std::result::Result<T, Failure>;

fn fail<T>(code: Code, message: impl Into<String>) -> Result<T> {
    Err(Failure {
        code,
        message: message.into(),
    })
}

/// The device the runtime presents, from the environment.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub arch: Arch,
    /// `gcnArchName` (the processor with its target features, as ROCm reports it).
    pub arch_name: &'static str,
    pub name: &'static str,
    pub memory_bytes: usize,
    pub compute_units: u32,
    pub schedule: Schedule,
    /// Threads a launch's workgroups are spread over.
    pub threads: usize,
    /// Print the dispatch counters to stderr when the process exits.
    pub stats: bool,
    /// A kernel whose first wave is traced to stderr, and the lane shown.
    pub trace: Option<(String, usize)>,
}

/// Selects the emulated GPU: `gfx942` (an MI300X, 64-lane waves, the default) or `gfx1100`.
pub const ARCH_ENV: &str = "CANDLE_ROCM_EMU_ARCH";
/// Device memory in GiB (default 8): what hipMemGetInfo reports and hipMalloc can hand out.
pub const MEMORY_ENV: &str = "CANDLE_ROCM_EMU_MEMORY_GIB";
/// Compute units reported (default 8): kernels that size their grids by them launch fewer blocks.
pub const COMPUTE_UNITS_ENV: &str = "CANDLE_ROCM_EMU_COMPUTE_UNITS";
/// The order of a workgroup's waves between barriers: `in-order` (default), `reversed`,
/// `shuffled` or `shuffled:SEED`.
pub const SCHEDULE_ENV: &str = "CANDLE_ROCM_EMU_SCHEDULE";
/// Threads a launch's workgroups run on (default: the machine's cores).
pub const THREADS_ENV: &str = "CANDLE_ROCM_EMU_THREADS";
/// `1`: print the dispatch counters (launches, wave-instructions, their rate) at exit.
pub const STATS_ENV: &str = "CANDLE_ROCM_EMU_STATS";
/// `KERNEL` or `KERNEL:LANE`: trace that kernel's first wave (instructions and the registers
/// each changed in the lane, 0 by default) to stderr.
pub const TRACE_ENV: &str = "CANDLE_ROCM_EMU_TRACE";

impl DeviceConfig {
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> std::result::Result<Self, String> {
        let arch = match get(ARCH_ENV).as_deref() {
            None | Some("gfx942") => Arch::Gfx942,
            Some("gfx1100") => Arch::Gfx1100,
            Some(other) => {
                return Err(format!(
                    "{ARCH_ENV}={other:?}: the emulator runs gfx942 or gfx1100"
                ))
            }
        };
        let number = |key: &str, default: usize| -> std::result::Result<usize, String> {
            get(key).map_or(Ok(default), |v| {
                v.parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .ok_or(format!("{key}={v:?} is not a positive number"))
            })
        };
        let schedule = match get(SCHEDULE_ENV).as_deref() {
            None | Some("in-order") => Schedule::InOrder,
            Some("reversed") => Schedule::Reversed,
            Some("shuffled") => Schedule::Shuffled(0x9e37_79b9_7f4a_7c15),
            Some(s) => match s.strip_prefix("shuffled:").and_then(|n| n.parse().ok()) {
                Some(seed) => Schedule::Shuffled(seed),
                None => return Err(format!("{SCHEDULE_ENV}={s:?} is not a schedule")),
            },
        };
        let (arch_name, name) = match arch {
            Arch::Gfx942 => (
                "gfx942:sramecc+:xnack-",
                "AMD Instinct MI300X (emulated by amdgpu-emu)",
            ),
            Arch::Gfx1100 => ("gfx1100", "AMD Radeon RX 7900 XTX (emulated by amdgpu-emu)"),
        };
        Ok(DeviceConfig {
            arch,
            arch_name,
            name,
            memory_bytes: number(MEMORY_ENV, 8)? << 30,
            compute_units: u32::try_from(number(COMPUTE_UNITS_ENV, 8)?).unwrap_or(u32::MAX),
            schedule,
            threads: number(
                THREADS_ENV,
                std::thread::available_parallelism().map_or(1, usize::from),
            )?,
            stats: get(STATS_ENV).is_some_and(|v| v == "1"),
            trace: get(TRACE_ENV).map(|t| match t.rsplit_once(':') {
                Some((k, lane)) if lane.parse::<usize>().is_ok() => {
                    (k.to_string(), lane.parse().unwrap_or(0))
                }
                _ => (t, 0),
            }),
        })
    }

    pub fn wave_size(&self) -> u32 {
        match self.arch {
            Arch::Gfx942 => 64,
            Arch::Gfx1100 => 32,
        }
    }
}

/// Work a stream runs, recorded as is while it is captured.
#[derive(Debug, Clone)]
enum Work {
    Launch {
        function: usize,
        launch: Launch,
    },
    /// From host memory at this address (read when the work runs, as the hardware would).
    HostToDevice {
        dst: u64,
        src: usize,
        bytes: usize,
    },
    DeviceToHost {
        dst: usize,
        src: u64,
        bytes: usize,
    },
    DeviceToDevice {
        dst: u64,
        src: u64,
        bytes: usize,
    },
    Memset {
        dst: u64,
        value: u8,
        bytes: usize,
    },
}

/// A kernel of a loaded module.
#[derive(Debug, Clone)]
struct Function {
    module: usize,
    kernel: String,
    /// (offset, size) of each explicit argument, in order.
    args: Vec<(u32, u32)>,
}

/// Counters since the process started.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub launches: u64,
    pub workgroups: u64,
    pub wave_instructions: u64,
    /// Wall time spent running kernels.
    pub dispatch_seconds: f64,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} launches, {} workgroups, {} wave-instructions in {:.2} s of dispatch: {:.2} M wave-instructions/s",
            self.launches,
            self.workgroups,
            self.wave_instructions,
            self.dispatch_seconds,
            self.wave_instructions as f64 / self.dispatch_seconds.max(1e-9) / 1e6
        )
    }
}

/// Everything the HIP entry points act on.
#[derive(Debug)]
pub struct Runtime {
    pub config: DeviceConfig,
    pub memory: Memory,
    modules: HashMap<usize, Module>,
    functions: HashMap<usize, Function>,
    /// Streams by handle; `Some(work)` while captured.
    streams: HashMap<usize, Option<Vec<Work>>>,
    /// Events by handle: when they were last recorded.
    events: HashMap<usize, Option<Instant>>,
    graphs: HashMap<usize, Vec<Work>>,
    graph_execs: HashMap<usize, Vec<Work>>,
    /// Host memory handed out by hipHostMalloc, owned here until hipHostFree.
    host: HashMap<usize, Vec<u64>>,
    next_handle: usize,
    pub stats: Stats,
}

/// The null stream: always exists, never captured here.
pub const NULL_STREAM: usize = 0;

impl Runtime {
    pub fn new(config: DeviceConfig) -> Self {
        Runtime {
            memory: Memory::with_capacity(config.memory_bytes),
            config,
            modules: HashMap::new(),
            functions: HashMap::new(),
            streams: HashMap::from([(NULL_STREAM, None)]),
            events: HashMap::new(),
            graphs: HashMap::new(),
            graph_execs: HashMap::new(),
            host: HashMap::new(),
            // handles are small nonzero numbers, distinct across kinds
            next_handle: 0x10,
            stats: Stats::default(),
        }
    }

    fn handle(&mut self) -> usize {
        self.next_handle += 0x10;
        self.next_handle
    }

    pub fn malloc(&mut self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        match self.memory.try_alloc(bytes) {
            Some(a) => Ok(a),
            None => {
                let (used, total) = self.memory.usage();
                fail(
                    Code::OutOfMemory,
                    format!("hipMalloc of {bytes} bytes: {used} of the emulated device's {total} in use"),
                )
            }
        }
    }

    pub fn free(&mut self, address: u64) -> Result<()> {
        if address == 0 || self.memory.free(address) {
            Ok(())
        } else {
            fail(
                Code::InvalidValue,
                format!("hipFree of {address:#x}: no allocation starts there"),
            )
        }
    }

    /// Host memory of `bytes`, 8-byte aligned; its address.
    pub fn host_alloc(&mut self, bytes: usize) -> Result<usize> {
        let mut words = Vec::new();
        if words.try_reserve_exact(bytes.div_ceil(8).max(1)).is_err() {
            return fail(Code::OutOfMemory, format!("hipHostMalloc of {bytes} bytes"));
        }
        words.resize(bytes.div_ceil(8).max(1), 0u64);
        let address = words.as_ptr() as usize;
        self.host.insert(address, words);
        Ok(address)
    }

    pub fn host_free(&mut self, address: usize) -> Result<()> {
        if address == 0 || self.host.remove(&address).is_some() {
            Ok(())
        } else {
            fail(
                Code::InvalidValue,
                format!("hipHostFree of {address:#x}: not from hipHostMalloc"),
            )
        }
    }

    pub fn stream_create(&mut self) -> usize {
        let h = self.handle();
        self.streams.insert(h, None);
        h
    }

    fn stream(&mut self, s: usize) -> Result<&mut Option<Vec<Work>>> {
        match self.streams.get_mut(&s) {
            Some(state) => Ok(state),
            None => fail(Code::InvalidHandle, format!("stream {s:#x} does not exist")),
        }
    }

    pub fn stream_destroy(&mut self, s: usize) -> Result<()> {
        if s == NULL_STREAM || self.streams.remove(&s).is_none() {
            return fail(Code::InvalidHandle, format!("stream {s:#x} does not exist"));
        }
        Ok(())
    }

    pub fn stream_synchronize(&mut self, s: usize) -> Result<()> {
        if self.stream(s)?.is_some() {
            return fail(
                Code::StreamCaptureUnsupported,
                "hipStreamSynchronize on a stream under capture",
            );
        }
        Ok(())
    }

    /// Runs `work` on stream `s`, or records it if the stream is captured.
    ///
    /// # Safety
    /// Host addresses in `work` must be valid for their bytes when it runs (now, or at each
    /// launch of a graph it is captured into).
    unsafe fn enqueue(&mut self, s: usize, work: Work) -> Result<()> {
        if let Some(captured) = self.stream(s)? {
            captured.push(work);
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.run(&work) }
    }

    /// # Safety
    /// As [`Runtime::enqueue`].
    unsafe fn run(&mut self, work: &Work) -> Result<()> {
        let outside = |what: &str, a: u64, n: usize| Failure {
            code: Code::InvalidValue,
            message: format!("{what}: {n} bytes at {a:#x} are outside every allocation"),
        };
        match *work {
            Work::HostToDevice { dst, src, bytes } => {
                // SAFETY: the caller guarantees `src` holds `bytes` readable bytes.
                let source = unsafe { std::slice::from_raw_parts(src as *const u8, bytes) };
                self.memory
                    .write(dst, source)
                    .ok_or_else(|| outside("hipMemcpyHtoDAsync", dst, bytes))?;
            }
            Work::DeviceToHost { dst, src, bytes } => {
                // SAFETY: the caller guarantees `dst` holds `bytes` writable bytes, apart from
                // the emulated memory (which lives in allocations of its own).
                let target = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, bytes) };
                self.memory
                    .read(src, target)
                    .ok_or_else(|| outside("hipMemcpyDtoHAsync", src, bytes))?;
            }
            Work::DeviceToDevice { dst, src, bytes } => {
                let data = self
                    .memory
                    .download(src, bytes)
                    .ok_or_else(|| outside("hipMemcpyDtoDAsync (source)", src, bytes))?;
                self.memory
                    .write(dst, &data)
                    .ok_or_else(|| outside("hipMemcpyDtoDAsync (destination)", dst, bytes))?;
            }
            Work::Memset { dst, value, bytes } => self
                .memory
                .fill(dst, bytes, value)
                .ok_or_else(|| outside("hipMemsetD8Async", dst, bytes))?,
            Work::Launch {
                function,
                ref launch,
            } => self.launch_now(function, launch)?,
        }
        Ok(())
    }

    fn launch_now(&mut self, function: usize, launch: &Launch) -> Result<()> {
        let f = self
            .functions
            .get(&function)
            .ok_or_else(|| Failure {
                code: Code::InvalidHandle,
                message: format!("function {function:#x} does not exist"),
            })?
            .clone();
        let module = self.modules.get(&f.module).ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("{}: its module was unloaded", f.kernel),
        })?;
        let mut launch = launch.clone();
        launch.schedule = self.config.schedule;
        launch.threads = self.config.threads;
        if let Some((kernel, lane)) = &self.config.trace {
            launch.trace = *kernel == f.kernel;
            launch.trace_lane = *lane;
        }
        let started = std::time::Instant::now();
        let result = module.dispatch(&f.kernel, &launch, &mut self.memory);
        self.stats.dispatch_seconds += started.elapsed().as_secs_f64();
        match result {
            Ok(report) => {
                self.stats.launches += 1;
                self.stats.workgroups += report.workgroups;
                self.stats.wave_instructions += report.wave_instructions;
                Ok(())
            }
            Err(e) => {
                let code = match e {
                    ExecError::BadAccess { .. } | ExecError::BadLds { .. } => Code::IllegalAddress,
                    ExecError::Dispatch { .. } => Code::InvalidValue,
                    _ => Code::LaunchFailure,
                };
                fail(
                    code,
                    format!("amdgpu-emu ({}): {e}", self.config.arch.name()),
                )
            }
        }
    }

    /// # Safety
    /// `src` holds `bytes` readable bytes until the copy runs.
    pub unsafe fn memcpy_htod(
        &mut self,
        dst: u64,
        src: usize,
        bytes: usize,
        s: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.enqueue(s, Work::HostToDevice { dst, src, bytes }) }
    }

    /// # Safety
    /// `dst` holds `bytes` writable bytes until the copy runs.
    pub unsafe fn memcpy_dtoh(
        &mut self,
        dst: usize,
        src: u64,
        bytes: usize,
        s: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.enqueue(s, Work::DeviceToHost { dst, src, bytes }) }
    }

    pub fn memcpy_dtod(&mut self, dst: u64, src: u64, bytes: usize, s: usize) -> Result<()> {
        // SAFETY: no host memory is involved.
        unsafe { self.enqueue(s, Work::DeviceToDevice { dst, src, bytes }) }
    }

    pub fn memset(&mut self, dst: u64, value: u8, bytes: usize, s: usize) -> Result<()> {
        // SAFETY: no host memory is involved.
        unsafe { self.enqueue(s, Work::Memset { dst, value, bytes }) }
    }

    pub fn event_create(&mut self) -> usize {
        let h = self.handle();
        self.events.insert(h, None);
        h
    }

    fn event(&mut self, e: usize) -> Result<&mut Option<Instant>> {
        match self.events.get_mut(&e) {
            Some(t) => Ok(t),
            None => fail(Code::InvalidHandle, format!("event {e:#x} does not exist")),
        }
    }

    pub fn event_record(&mut self, e: usize, s: usize) -> Result<()> {
        if self.stream(s)?.is_some() {
            return fail(
                Code::StreamCaptureUnsupported,
                "hipEventRecord on a stream under capture",
            );
        }
        *self.event(e)? = Some(Instant::now());
        Ok(())
    }

    pub fn event_check(&mut self, e: usize) -> Result<()> {
        self.event(e).map(|_| ())
    }

    pub fn event_elapsed_ms(&mut self, start: usize, end: usize) -> Result<f32> {
        let (Some(a), Some(b)) = (*self.event(start)?, *self.event(end)?) else {
            return fail(
                Code::InvalidHandle,
                "hipEventElapsedTime of an event never recorded",
            );
        };
        Ok(b.saturating_duration_since(a).as_secs_f32() * 1e3)
    }

    pub fn event_destroy(&mut self, e: usize) -> Result<()> {
        self.events.remove(&e).map(|_| ()).ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("event {e:#x} does not exist"),
        })
    }

    pub fn module_load(&mut self, image: &[u8]) -> Result<usize> {
        let code = CodeObject::parse(image).map_err(|e| Failure {
            code: Code::InvalidImage,
            message: format!("hipModuleLoadData: {e}"),
        })?;
        if code.arch != self.config.arch {
            return fail(
                Code::InvalidImage,
                format!(
                    "hipModuleLoadData: a code object for {} on an emulated {}",
                    code.arch.name(),
                    self.config.arch.name()
                ),
            );
        }
        let h = self.handle();
        self.modules.insert(h, Module::new(code));
        Ok(h)
    }

    pub fn module_unload(&mut self, m: usize) -> Result<()> {
        if self.modules.remove(&m).is_none() {
            return fail(Code::InvalidHandle, format!("module {m:#x} is not loaded"));
        }
        self.functions.retain(|_, f| f.module != m);
        Ok(())
    }

    pub fn module_function(&mut self, m: usize, name: &str) -> Result<usize> {
        let module = self.modules.get(&m).ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("module {m:#x} is not loaded"),
        })?;
        let Some(k) = module.code.kernel(name) else {
            return fail(Code::NotFound, format!("no kernel `{name}` in the module"));
        };
        let args = k
            .args
            .iter()
            .filter(|a| !matches!(a.kind, ArgKind::Hidden(_)))
            .map(|a| (a.offset, a.size))
            .collect();
        let f = Function {
            module: m,
            kernel: name.to_string(),
            args,
        };
        let h = self.handle();
        self.functions.insert(h, f);
        Ok(h)
    }

    /// Workgroups of function `f` one compute unit holds at once (hipModuleOccupancy...).
    pub fn max_active_blocks(&self, f: usize, threads: u32, dynamic_lds: u32) -> Result<u32> {
        let function = self.functions.get(&f).ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("function {f:#x} does not exist"),
        })?;
        let module = self.modules.get(&function.module).ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("module {:#x} is not loaded", function.module),
        })?;
        let kernel = module
            .code
            .kernel(&function.kernel)
            .ok_or_else(|| Failure {
                code: Code::NotFound,
                message: format!("no kernel `{}` in the module", function.kernel),
            })?;
        Ok(kernel.workgroups_per_cu(module.code.arch, threads, dynamic_lds))
    }

    /// The explicit arguments' (offset, size) of a function, for marshalling a launch.
    pub fn function_args(&self, f: usize) -> Result<&[(u32, u32)]> {
        self.functions
            .get(&f)
            .map(|f| f.args.as_slice())
            .ok_or_else(|| Failure {
                code: Code::InvalidHandle,
                message: format!("function {f:#x} does not exist"),
            })
    }

    pub fn launch(&mut self, f: usize, launch: Launch, s: usize) -> Result<()> {
        self.function_args(f)?;
        // SAFETY: a launch reads no host memory.
        unsafe {
            self.enqueue(
                s,
                Work::Launch {
                    function: f,
                    launch,
                },
            )
        }
    }

    pub fn begin_capture(&mut self, s: usize) -> Result<()> {
        if s == NULL_STREAM {
            return fail(Code::StreamCaptureUnsupported, "capturing the null stream");
        }
        let state = self.stream(s)?;
        if state.is_some() {
            return fail(
                Code::StreamCaptureUnsupported,
                "the stream is already captured",
            );
        }
        *state = Some(Vec::new());
        Ok(())
    }

    pub fn end_capture(&mut self, s: usize) -> Result<usize> {
        let Some(work) = self.stream(s)?.take() else {
            return fail(
                Code::InvalidValue,
                "hipStreamEndCapture: the stream is not captured",
            );
        };
        let h = self.handle();
        self.graphs.insert(h, work);
        Ok(h)
    }

    pub fn graph_instantiate(&mut self, g: usize) -> Result<usize> {
        let work = self.graphs.get(&g).cloned().ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("graph {g:#x} does not exist"),
        })?;
        let h = self.handle();
        self.graph_execs.insert(h, work);
        Ok(h)
    }

    /// # Safety
    /// The host memory the captured copies name is valid now.
    pub unsafe fn graph_launch(&mut self, exec: usize, s: usize) -> Result<()> {
        let work = self
            .graph_execs
            .get(&exec)
            .cloned()
            .ok_or_else(|| Failure {
                code: Code::InvalidHandle,
                message: format!("graph exec {exec:#x} does not exist"),
            })?;
        for w in work {
            // SAFETY: forwarded from the caller.
            unsafe { self.enqueue(s, w)? };
        }
        Ok(())
    }

    pub fn graph_destroy(&mut self, g: usize) -> Result<()> {
        self.graphs.remove(&g).map(|_| ()).ok_or_else(|| Failure {
            code: Code::InvalidHandle,
            message: format!("graph {g:#x} does not exist"),
        })
    }

    pub fn graph_exec_destroy(&mut self, g: usize) -> Result<()> {
        self.graph_execs
            .remove(&g)
            .map(|_| ())
            .ok_or_else(|| Failure {
                code: Code::InvalidHandle,
                message: format!("graph exec {g:#x} does not exist"),
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn runtime() -> Runtime {
        Runtime::new(DeviceConfig::from_lookup(|_| None).unwrap())
    }

    #[test]
    fn the_environment_picks_the_device() {
        let c = DeviceConfig::from_lookup(|k| (k == ARCH_ENV).then(|| "gfx1100".into())).unwrap();
        assert_eq!((c.arch, c.wave_size()), (Arch::Gfx1100, 32));
        let c = DeviceConfig::from_lookup(|_| None).unwrap();
        assert_eq!(
            (c.arch, c.wave_size(), c.arch_name),
            (Arch::Gfx942, 64, "gfx942:sramecc+:xnack-")
        );
        assert!(DeviceConfig::from_lookup(|k| (k == ARCH_ENV).then(|| "gfx90a".into())).is_err());
        assert!(DeviceConfig::from_lookup(|k| (k == MEMORY_ENV).then(|| "0".into())).is_err());
        let c = DeviceConfig::from_lookup(|k| (k == SCHEDULE_ENV).then(|| "shuffled:7".into()));
        assert_eq!(c.unwrap().schedule, Schedule::Shuffled(7));
    }

    #[test]
    fn copies_and_sets_reach_the_emulated_memory() {
        let mut rt = runtime();
        let a = rt.malloc(64).unwrap();
        let b = rt.malloc(64).unwrap();
        let src: Vec<u8> = (0..64).collect();
        let mut out = vec![0u8; 64];
        // SAFETY: `src` and `out` outlive the synchronous copies.
        unsafe {
            rt.memcpy_htod(a, src.as_ptr() as usize, 64, NULL_STREAM)
                .unwrap();
            rt.memcpy_dtod(b, a, 64, NULL_STREAM).unwrap();
            rt.memset(b + 8, 0xee, 4, NULL_STREAM).unwrap();
            rt.memcpy_dtoh(out.as_mut_ptr() as usize, b, 64, NULL_STREAM)
                .unwrap();
        }
        let mut want = src.clone();
        want[8..12].fill(0xee);
        assert_eq!(out, want);
        // past the end of an allocation: an error, nothing written
        let err = rt.memset(a + 60, 0, 8, NULL_STREAM).unwrap_err();
        assert_eq!(err.code, Code::InvalidValue);
        rt.free(a).unwrap();
        assert_eq!(rt.free(a).unwrap_err().code, Code::InvalidValue);
    }

    #[test]
    fn memory_runs_out_with_an_error() {
        let mut rt = Runtime::new(
            DeviceConfig::from_lookup(|k| (k == MEMORY_ENV).then(|| "1".into())).unwrap(),
        );
        let a = rt.malloc(768 << 20).unwrap();
        assert_eq!(rt.malloc(512 << 20).unwrap_err().code, Code::OutOfMemory);
        rt.free(a).unwrap();
        rt.malloc(512 << 20).unwrap();
    }

    #[test]
    fn captured_work_runs_at_each_graph_launch() {
        let mut rt = runtime();
        let s = rt.stream_create();
        let a = rt.malloc(16).unwrap();
        rt.begin_capture(s).unwrap();
        rt.memset(a, 7, 16, s).unwrap();
        assert!(rt.stream_synchronize(s).is_err());
        let g = rt.end_capture(s).unwrap();
        // captured, not run
        assert_eq!(rt.memory.download(a, 16).unwrap(), vec![0; 16]);
        let exec = rt.graph_instantiate(g).unwrap();
        // SAFETY: the graph reads no host memory.
        unsafe { rt.graph_launch(exec, s).unwrap() };
        assert_eq!(rt.memory.download(a, 16).unwrap(), vec![7; 16]);
        rt.memset(a, 0, 16, s).unwrap();
        // SAFETY: as above.
        unsafe { rt.graph_launch(exec, s).unwrap() };
        assert_eq!(rt.memory.download(a, 16).unwrap(), vec![7; 16]);
        rt.graph_exec_destroy(exec).unwrap();
        rt.graph_destroy(g).unwrap();
        rt.stream_destroy(s).unwrap();
        assert!(rt.stream_destroy(s).is_err());
    }

    #[test]
    fn a_module_that_is_not_a_code_object_is_refused() {
        let mut rt = runtime();
        let err = rt.module_load(b"\x7fELF not really").unwrap_err();
        assert_eq!(err.code, Code::InvalidImage);
    }
}
