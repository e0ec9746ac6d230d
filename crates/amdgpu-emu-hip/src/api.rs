//! The exported C entry points: argument checks, handles to and from pointers, and the
//! thread's last error text. Signatures use the HIP headers' types (cubecl-hip-sys's bindings
//! of ROCm's `hip_runtime_api.h`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard, OnceLock};

use amdgpu_emu::exec::Launch;
use cubecl_hip_sys as hip;
use hip::{
    hipDeviceProp_tR0600, hipDeviceptr_t, hipError_t, hipEvent_t, hipFunction_t, hipGraphExec_t,
    hipGraphNode_t, hipGraph_t, hipModule_t, hipStreamCaptureMode, hipStream_t,
};

use crate::runtime::{Code, DeviceConfig, Failure, Runtime};

const SUCCESS: hipError_t = 0;
const NOT_INITIALIZED: hipError_t = 3;
const NO_DEVICE: hipError_t = 100;

/// The runtime version reported: ROCm 6.4's HIP (major * 10^7 + minor * 10^5 + patch).
const RUNTIME_VERSION: c_int = 60_443_484;

static RUNTIME: OnceLock<std::result::Result<Mutex<Runtime>, String>> = OnceLock::new();

thread_local! {
    /// The last failure on this thread: its code and text, for hipGetErrorString.
    static LAST: RefCell<(hipError_t, CString)> = RefCell::new((SUCCESS, CString::default()));
}

fn runtime() -> std::result::Result<MutexGuard<'static, Runtime>, hipError_t> {
    let rt = RUNTIME.get_or_init(|| {
        DeviceConfig::from_lookup(|k| std::env::var(k).ok()).map(|c| {
            if c.stats {
                // SAFETY: registers a function with no preconditions, run once at exit.
                unsafe { atexit(print_stats) };
            }
            Mutex::new(Runtime::new(c))
        })
    });
    match rt {
        Ok(m) => Ok(m.lock().unwrap_or_else(|p| p.into_inner())),
        Err(e) => Err(record(&Failure {
            code: Code::InvalidValue,
            message: e.clone(),
        })),
    }
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
}

/// The dispatch counters, at exit (`CANDLE_ROCM_EMU_STATS=1`); nothing where another thread
/// still holds the runtime.
extern "C" fn print_stats() {
    if let Some(Ok(m)) = RUNTIME.get() {
        if let Ok(rt) = m.try_lock() {
            eprintln!(
                "amdgpu-emu ({}, {} threads): {}",
                rt.config.arch.name(),
                rt.config.threads,
                rt.stats
            );
        }
    }
}

fn record(f: &Failure) -> hipError_t {
    let code = f.code as hipError_t;
    eprintln!("amdgpu-emu HIP: {}: {}", f.code.name(), f.message);
    let text = CString::new(f.message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = (code, text));
    code
}

/// Runs `body` on the runtime; its failure becomes the returned code. A panic inside (an
/// emulator bug) is caught at this boundary and fails the call with its message: nothing
/// unwinds into the caller's C frames.
fn with(body: impl FnOnce(&mut Runtime) -> crate::runtime::Result<()>) -> hipError_t {
    let mut rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut rt)));
    match outcome {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(f)) => record(&f),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            record(&Failure {
                code: Code::LaunchFailure,
                message: format!("the emulator failed: {what}"),
            })
        }
    }
}

fn invalid(what: &str) -> hipError_t {
    record(&Failure {
        code: Code::InvalidValue,
        message: what.to_string(),
    })
}

fn handle<T>(p: *mut T) -> usize {
    p as usize
}

/// Writes `value` through an out-pointer the caller passed.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    true
}

#[no_mangle]
pub extern "C" fn hipInit(_flags: c_uint) -> hipError_t {
    with(|_| Ok(()))
}

/// # Safety
/// `version` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> hipError_t {
    // SAFETY: caller's contract.
    if unsafe { put(version, RUNTIME_VERSION) } {
        SUCCESS
    } else {
        invalid("hipRuntimeGetVersion: null pointer")
    }
}

/// # Safety
/// `count` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> hipError_t {
    if let Err(code) = runtime() {
        // SAFETY: caller's contract.
        unsafe { put(count, 0) };
        return if code == NOT_INITIALIZED {
            NO_DEVICE
        } else {
            code
        };
    }
    // SAFETY: caller's contract.
    if unsafe { put(count, 1) } {
        SUCCESS
    } else {
        invalid("hipGetDeviceCount: null pointer")
    }
}

#[no_mangle]
pub extern "C" fn hipSetDevice(device: c_int) -> hipError_t {
    with(|_| match device {
        0 => Ok(()),
        d => Err(Failure {
            code: Code::InvalidDevice,
            message: format!("hipSetDevice({d}): the emulator presents one device"),
        }),
    })
}

fn copy_name(dst: &mut [c_char], src: &str) {
    let room = dst.len() - 1;
    for (d, s) in dst.iter_mut().zip(src.bytes().take(room)) {
        *d = s as c_char;
    }
}

/// # Safety
/// `prop` is null or points at a writable `hipDeviceProp_tR0600`.
#[no_mangle]
pub unsafe extern "C" fn hipGetDevicePropertiesR0600(
    prop: *mut hipDeviceProp_tR0600,
    device: c_int,
) -> hipError_t {
    // SAFETY: caller's contract; a null pointer is refused.
    let Some(prop) = (unsafe { prop.as_mut() }) else {
        return invalid("hipGetDevicePropertiesR0600: null pointer");
    };
    with(|rt| {
        if device != 0 {
            return Err(Failure {
                code: Code::InvalidDevice,
                message: format!("device {device}: the emulator presents one device"),
            });
        }
        let c = &rt.config;
        // SAFETY: a plain C struct of numbers and arrays; all zeros is a valid value.
        *prop = unsafe { std::mem::zeroed() };
        copy_name(&mut prop.name, c.name);
        copy_name(&mut prop.gcnArchName, c.arch_name);
        prop.totalGlobalMem = c.memory_bytes;
        prop.sharedMemPerBlock = 64 << 10;
        prop.regsPerBlock = 65536;
        prop.warpSize = c.wave_size() as c_int;
        prop.maxThreadsPerBlock = 1024;
        prop.maxThreadsDim = [1024, 1024, 1024];
        prop.maxGridSize = [i32::MAX, 65535, 65535];
        prop.multiProcessorCount = c.compute_units as c_int;
        (prop.major, prop.minor) = match c.arch {
            amdgpu_emu::Arch::Gfx942 => (9, 4),
            amdgpu_emu::Arch::Gfx1100 => (11, 0),
        };
        Ok(())
    })
}

fn code_name(code: hipError_t) -> &'static CStr {
    match code {
        SUCCESS => c"hipSuccess",
        NOT_INITIALIZED => c"hipErrorNotInitialized",
        NO_DEVICE => c"hipErrorNoDevice",
        1 => c"hipErrorInvalidValue",
        2 => c"hipErrorOutOfMemory",
        101 => c"hipErrorInvalidDevice",
        200 => c"hipErrorInvalidImage",
        400 => c"hipErrorInvalidHandle",
        500 => c"hipErrorNotFound",
        700 => c"hipErrorIllegalAddress",
        719 => c"hipErrorLaunchFailure",
        900 => c"hipErrorStreamCaptureUnsupported",
        _ => c"hipErrorUnknown",
    }
}

#[no_mangle]
pub extern "C" fn hipGetErrorName(code: hipError_t) -> *const c_char {
    code_name(code).as_ptr()
}

/// The text of this thread's last failure where it had `code`, else the code's name. The
/// pointer stays valid until the thread's next failure.
#[no_mangle]
pub extern "C" fn hipGetErrorString(code: hipError_t) -> *const c_char {
    LAST.with(|l| {
        let l = l.borrow();
        if l.0 == code && code != SUCCESS {
            l.1.as_ptr()
        } else {
            code_name(code).as_ptr()
        }
    })
}

/// # Safety
/// `free` and `total` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> hipError_t {
    with(|rt| {
        let (used, all) = rt.memory.usage();
        // SAFETY: caller's contract.
        let ok = unsafe { put(free, all - used) && put(total, all) };
        if ok {
            Ok(())
        } else {
            Err(Failure {
                code: Code::InvalidValue,
                message: "hipMemGetInfo: null pointer".into(),
            })
        }
    })
}

fn null(what: &str) -> Failure {
    Failure {
        code: Code::InvalidValue,
        message: format!("{what}: null pointer"),
    }
}

/// # Safety
/// `ptr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> hipError_t {
    with(|rt| {
        let a = rt.malloc(size)?;
        // SAFETY: caller's contract.
        if unsafe { put(ptr, a as usize as *mut c_void) } {
            Ok(())
        } else {
            rt.free(a)?;
            Err(null("hipMalloc"))
        }
    })
}

#[no_mangle]
pub extern "C" fn hipFree(ptr: *mut c_void) -> hipError_t {
    with(|rt| rt.free(ptr as usize as u64))
}

/// # Safety
/// `ptr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(
    ptr: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> hipError_t {
    with(|rt| {
        let a = rt.host_alloc(size)?;
        // SAFETY: caller's contract.
        if unsafe { put(ptr, a as *mut c_void) } {
            Ok(())
        } else {
            rt.host_free(a)?;
            Err(null("hipHostMalloc"))
        }
    })
}

#[no_mangle]
pub extern "C" fn hipHostFree(ptr: *mut c_void) -> hipError_t {
    with(|rt| rt.host_free(ptr as usize))
}

/// # Safety
/// `stream` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithFlags(
    stream: *mut hipStream_t,
    _flags: c_uint,
) -> hipError_t {
    with(|rt| {
        let s = rt.stream_create();
        // SAFETY: caller's contract.
        if unsafe { put(stream, s as hipStream_t) } {
            Ok(())
        } else {
            rt.stream_destroy(s)?;
            Err(null("hipStreamCreateWithFlags"))
        }
    })
}

#[no_mangle]
pub extern "C" fn hipStreamDestroy(stream: hipStream_t) -> hipError_t {
    with(|rt| rt.stream_destroy(handle(stream)))
}

#[no_mangle]
pub extern "C" fn hipStreamSynchronize(stream: hipStream_t) -> hipError_t {
    with(|rt| rt.stream_synchronize(handle(stream)))
}

/// # Safety
/// `src` holds `size` readable bytes until the copy runs (now, or at each launch of a graph
/// that captured it).
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(
    dst: hipDeviceptr_t,
    src: *mut c_void,
    size: usize,
    stream: hipStream_t,
) -> hipError_t {
    if src.is_null() && size > 0 {
        return invalid("hipMemcpyHtoDAsync: null source");
    }
    // SAFETY: caller's contract.
    with(|rt| unsafe { rt.memcpy_htod(dst as u64, src as usize, size, handle(stream)) })
}

/// # Safety
/// `dst` holds `size` writable bytes until the copy runs.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(
    dst: *mut c_void,
    src: hipDeviceptr_t,
    size: usize,
    stream: hipStream_t,
) -> hipError_t {
    if dst.is_null() && size > 0 {
        return invalid("hipMemcpyDtoHAsync: null destination");
    }
    // SAFETY: caller's contract.
    with(|rt| unsafe { rt.memcpy_dtoh(dst as usize, src as u64, size, handle(stream)) })
}

#[no_mangle]
pub extern "C" fn hipMemcpyDtoDAsync(
    dst: hipDeviceptr_t,
    src: hipDeviceptr_t,
    size: usize,
    stream: hipStream_t,
) -> hipError_t {
    with(|rt| rt.memcpy_dtod(dst as u64, src as u64, size, handle(stream)))
}

#[no_mangle]
pub extern "C" fn hipMemsetD8Async(
    dst: hipDeviceptr_t,
    value: c_uchar,
    count: usize,
    stream: hipStream_t,
) -> hipError_t {
    with(|rt| rt.memset(dst as u64, value, count, handle(stream)))
}

/// # Safety
/// `event` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreate(event: *mut hipEvent_t) -> hipError_t {
    with(|rt| {
        let e = rt.event_create();
        // SAFETY: caller's contract.
        if unsafe { put(event, e as hipEvent_t) } {
            Ok(())
        } else {
            rt.event_destroy(e)?;
            Err(null("hipEventCreate"))
        }
    })
}

#[no_mangle]
pub extern "C" fn hipEventDestroy(event: hipEvent_t) -> hipError_t {
    with(|rt| rt.event_destroy(handle(event)))
}

#[no_mangle]
pub extern "C" fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> hipError_t {
    with(|rt| rt.event_record(handle(event), handle(stream)))
}

#[no_mangle]
pub extern "C" fn hipEventSynchronize(event: hipEvent_t) -> hipError_t {
    with(|rt| rt.event_check(handle(event)))
}

/// Always complete: work runs when it is enqueued.
#[no_mangle]
pub extern "C" fn hipEventQuery(event: hipEvent_t) -> hipError_t {
    with(|rt| rt.event_check(handle(event)))
}

/// # Safety
/// `ms` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipEventElapsedTime(
    ms: *mut f32,
    start: hipEvent_t,
    stop: hipEvent_t,
) -> hipError_t {
    with(|rt| {
        let t = rt.event_elapsed_ms(handle(start), handle(stop))?;
        // SAFETY: caller's contract.
        if unsafe { put(ms, t) } {
            Ok(())
        } else {
            Err(null("hipEventElapsedTime"))
        }
    })
}

/// The length of the ELF image at `image`: the furthest end of its header tables and of the
/// sections and segments they list (hipModuleLoadData is given no length).
///
/// # Safety
/// `image` points at a complete ELF64 image, or at least at 64 readable bytes.
unsafe fn elf_length(image: *const u8) -> Option<usize> {
    // SAFETY: the caller guarantees the 64-byte header is readable.
    let header = unsafe { std::slice::from_raw_parts(image, 64) };
    if &header[..4] != b"\x7fELF" || header[4] != 2 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u64_at = |b: &[u8], at: usize| {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8])) as usize
    };
    let (phoff, shoff) = (u64_at(header, 0x20), u64_at(header, 0x28));
    let (phentsize, phnum) = (u16_at(header, 0x36), u16_at(header, 0x38));
    let (shentsize, shnum) = (u16_at(header, 0x3a), u16_at(header, 0x3c));
    if phentsize < 56 && phnum > 0 || shentsize < 64 && shnum > 0 {
        return None;
    }
    let mut end = 64usize
        .max(phoff + phentsize * phnum)
        .max(shoff + shentsize * shnum);
    for i in 0..shnum {
        // SAFETY: the section header table lies inside the image (its header says so).
        let sh = unsafe { std::slice::from_raw_parts(image.add(shoff + i * shentsize), 64) };
        let kind = u32::from_le_bytes([sh[4], sh[5], sh[6], sh[7]]);
        // SHT_NOBITS occupies no bytes of the file
        if kind != 8 {
            end = end.max(u64_at(sh, 0x18) + u64_at(sh, 0x20));
        }
    }
    for i in 0..phnum {
        // SAFETY: as above, for the program header table.
        let ph = unsafe { std::slice::from_raw_parts(image.add(phoff + i * phentsize), 56) };
        end = end.max(u64_at(ph, 0x08) + u64_at(ph, 0x20));
    }
    Some(end)
}

/// # Safety
/// `module` is null or writable; `image` is a complete code object (an ELF image).
#[no_mangle]
pub unsafe extern "C" fn hipModuleLoadData(
    module: *mut hipModule_t,
    image: *const c_void,
) -> hipError_t {
    if image.is_null() {
        return invalid("hipModuleLoadData: null image");
    }
    // SAFETY: caller's contract.
    let Some(len) = (unsafe { elf_length(image.cast()) }) else {
        return record(&Failure {
            code: Code::InvalidImage,
            message: "hipModuleLoadData: not an ELF64 code object".into(),
        });
    };
    // SAFETY: the image holds `len` bytes, the extent its own headers give.
    let bytes = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), len) };
    with(|rt| {
        let m = rt.module_load(bytes)?;
        // SAFETY: caller's contract.
        if unsafe { put(module, m as hipModule_t) } {
            Ok(())
        } else {
            rt.module_unload(m)?;
            Err(null("hipModuleLoadData"))
        }
    })
}

#[no_mangle]
pub extern "C" fn hipModuleUnload(module: hipModule_t) -> hipError_t {
    with(|rt| rt.module_unload(handle(module)))
}

/// # Safety
/// `function` is null or writable; `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hipModuleGetFunction(
    function: *mut hipFunction_t,
    module: hipModule_t,
    name: *const c_char,
) -> hipError_t {
    if name.is_null() {
        return invalid("hipModuleGetFunction: null name");
    }
    // SAFETY: caller's contract.
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    let found = match runtime() {
        Ok(mut rt) => rt.module_function(handle(module), &name),
        Err(code) => return code,
    };
    match found {
        // SAFETY: caller's contract.
        Ok(f) if unsafe { put(function, f as hipFunction_t) } => SUCCESS,
        Ok(_) => invalid("hipModuleGetFunction: null pointer"),
        // a kernel the module lacks is an answer, not a failure worth a line on stderr
        Err(f) if f.code == Code::NotFound => f.code as hipError_t,
        Err(f) => record(&f),
    }
}

/// # Safety
/// `blocks` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    function: hipFunction_t,
    block_size: c_int,
    dynamic_lds: usize,
) -> hipError_t {
    let (Ok(threads), Ok(lds)) = (u32::try_from(block_size), u32::try_from(dynamic_lds)) else {
        return invalid("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor: block size or LDS");
    };
    with(|rt| {
        let n = rt.max_active_blocks(handle(function), threads, lds)?;
        // SAFETY: caller's contract.
        if unsafe { put(blocks, n.min(c_int::MAX as u32) as c_int) } {
            Ok(())
        } else {
            Err(null("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor"))
        }
    })
}

/// # Safety
/// `params` holds one pointer per explicit kernel argument, each to a value of the
/// argument's size; `extra` is null (the argument buffer form is not served).
#[no_mangle]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    function: hipFunction_t,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: hipStream_t,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> hipError_t {
    if !extra.is_null() {
        return invalid("hipModuleLaunchKernel: `extra` argument buffers are not served");
    }
    with(|rt| {
        let args = rt.function_args(handle(function))?;
        let end = args
            .iter()
            .map(|&(o, s)| (o + s) as usize)
            .max()
            .unwrap_or(0);
        let mut bytes = vec![0u8; end];
        if !args.is_empty() && params.is_null() {
            return Err(null("hipModuleLaunchKernel (kernel parameters)"));
        }
        for (i, &(offset, size)) in args.iter().enumerate() {
            // SAFETY: one pointer per explicit argument (caller's contract).
            let value = unsafe { *params.add(i) };
            if value.is_null() {
                return Err(null("hipModuleLaunchKernel (a kernel parameter)"));
            }
            // SAFETY: the value holds the argument's `size` bytes (caller's contract).
            let value = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size as usize) };
            bytes[offset as usize..(offset + size) as usize].copy_from_slice(value);
        }
        let block = [block_x, block_y, block_z];
        let blocks = [grid_x, grid_y, grid_z];
        let grid = [0, 1, 2].map(|d| blocks[d].saturating_mul(block[d]));
        if blocks.iter().chain(&block).any(|&n| n == 0) {
            return Err(Failure {
                code: Code::InvalidValue,
                message: format!("hipModuleLaunchKernel: grid {blocks:?} x block {block:?}"),
            });
        }
        let launch = Launch {
            grid,
            block,
            args: bytes,
            dynamic_lds: shared_mem_bytes,
            ..Launch::default()
        };
        rt.launch(handle(function), launch, handle(stream))
    })
}

#[no_mangle]
pub extern "C" fn hipStreamBeginCapture(
    stream: hipStream_t,
    _mode: hipStreamCaptureMode,
) -> hipError_t {
    with(|rt| rt.begin_capture(handle(stream)))
}

/// # Safety
/// `graph` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipStreamEndCapture(
    stream: hipStream_t,
    graph: *mut hipGraph_t,
) -> hipError_t {
    with(|rt| {
        let g = rt.end_capture(handle(stream))?;
        // SAFETY: caller's contract.
        if unsafe { put(graph, g as hipGraph_t) } {
            Ok(())
        } else {
            rt.graph_destroy(g)?;
            Err(null("hipStreamEndCapture"))
        }
    })
}

/// # Safety
/// `exec` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn hipGraphInstantiate(
    exec: *mut hipGraphExec_t,
    graph: hipGraph_t,
    _error_node: *mut hipGraphNode_t,
    _log: *mut c_char,
    _log_size: usize,
) -> hipError_t {
    with(|rt| {
        let e = rt.graph_instantiate(handle(graph))?;
        // SAFETY: caller's contract.
        if unsafe { put(exec, e as hipGraphExec_t) } {
            Ok(())
        } else {
            rt.graph_exec_destroy(e)?;
            Err(null("hipGraphInstantiate"))
        }
    })
}

/// # Safety
/// The host memory the graph's captured copies name is valid now.
#[no_mangle]
pub unsafe extern "C" fn hipGraphLaunch(exec: hipGraphExec_t, stream: hipStream_t) -> hipError_t {
    // SAFETY: caller's contract.
    with(|rt| unsafe { rt.graph_launch(handle(exec), handle(stream)) })
}

#[no_mangle]
pub extern "C" fn hipGraphExecDestroy(exec: hipGraphExec_t) -> hipError_t {
    with(|rt| rt.graph_exec_destroy(handle(exec)))
}

#[no_mangle]
pub extern "C" fn hipGraphDestroy(graph: hipGraph_t) -> hipError_t {
    with(|rt| rt.graph_destroy(handle(graph)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_the_runtime_returns_has_its_name() {
        for c in Code::ALL {
            assert_eq!(
                code_name(c as hipError_t).to_str().unwrap(),
                c.name(),
                "{c:?}"
            );
        }
    }

    #[test]
    fn an_elf_image_is_measured_by_its_headers() {
        let mut image = [0u8; 200];
        image[..5].copy_from_slice(b"\x7fELF\x02");
        // one section header at 100 (64 bytes), describing bytes 10..130
        image[0x28..0x30].copy_from_slice(&100u64.to_le_bytes());
        image[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        image[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
        image[100 + 4] = 1;
        image[100 + 0x18..100 + 0x20].copy_from_slice(&10u64.to_le_bytes());
        image[100 + 0x20..100 + 0x28].copy_from_slice(&120u64.to_le_bytes());
        // SAFETY: the image holds what its headers name.
        assert_eq!(unsafe { elf_length(image.as_ptr()) }, Some(164));
        image[0] = 0;
        // SAFETY: 64 readable bytes.
        assert_eq!(unsafe { elf_length(image.as_ptr()) }, None);
    }
}
