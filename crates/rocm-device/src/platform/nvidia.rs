//! The nvidia platform: the same HIP-shaped raw interface served by the CUDA driver API and
//! NVRTC through cudarc's dynamically loaded bindings. It exists so the whole stack runs on a
//! real GPU where no AMD GPU is at hand; it stays thin.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::ptr;

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as rtc;

use super::{
    AllocFailure, CompileInputs, DeviceInfo, DevicePtr, EventHandle, FunctionHandle,
    GraphExecHandle, GraphHandle, HostPtr, LibraryStatus, ModuleHandle, Platform, RawDevice,
    StreamHandle,
};
use crate::error::{Error, Result};
use crate::sys::library::find_library;

/// The dynamic shared memory a launch gets without opting into more.
const DEFAULT_SHARED_BYTES: u32 = 48 << 10;

const DRIVER_HINT: &str = "install the NVIDIA driver (libcuda.so)";
const NVRTC_HINT: &str = "install NVRTC (CUDA toolkit, or the nvidia-cuda-nvrtc wheel) and put \
    its lib folder on LD_LIBRARY_PATH";

/// The loader names cudarc tries, which are the only ones its bindings will load.
fn candidates(name: &str) -> Vec<String> {
    cudarc::get_lib_name_candidates(name)
}

pub(crate) fn libraries() -> Vec<LibraryStatus> {
    // Bare names only: cudarc loads through the loader path, so a library found elsewhere
    // would be reported as found and still fail.
    let none: [PathBuf; 0] = [];
    vec![
        find_library(
            "CUDA driver (libcuda)",
            &candidates("cuda"),
            &none,
            DRIVER_HINT,
        ),
        find_library("NVRTC (libnvrtc)", &candidates("nvrtc"), &none, NVRTC_HINT),
    ]
}

fn ensure_driver() -> Result<()> {
    Ok(libraries()[0].require()?)
}
fn ensure_nvrtc() -> Result<()> {
    Ok(libraries()[1].require()?)
}

fn check(call: &'static str, code: cu::CUresult) -> Result<()> {
    if code == cu::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (mut name, mut message): (*const c_char, *const c_char) = (ptr::null(), ptr::null());
    // SAFETY: the error queries accept any code and write static strings.
    unsafe {
        cu::cuGetErrorName(code, &mut name);
        cu::cuGetErrorString(code, &mut message);
    }
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: static NUL-terminated string from the driver.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    Err(Error::Driver {
        platform: Platform::Nvidia,
        call,
        code: code as i64,
        name: text(name),
        message: text(message),
    })
}

fn init() -> Result<()> {
    ensure_driver()?;
    // SAFETY: the driver library is present (checked); cuInit(0) is idempotent.
    check("cuInit", unsafe { cu::cuInit(0) })
}

pub(crate) fn device_count() -> Result<usize> {
    ensure_driver()?;
    // SAFETY: library present; cuInit(0) is idempotent.
    let code = unsafe { cu::cuInit(0) };
    if code == cu::CUresult::CUDA_ERROR_NO_DEVICE {
        return Err(Error::NoDevice {
            platform: Platform::Nvidia,
            detail: "the CUDA driver loaded but reports no GPU".into(),
        });
    }
    check("cuInit", code)?;
    let mut count = 0;
    // SAFETY: valid out-pointer.
    check("cuDeviceGetCount", unsafe {
        cu::cuDeviceGetCount(&mut count)
    })?;
    if count <= 0 {
        return Err(Error::NoDevice {
            platform: Platform::Nvidia,
            detail: "the CUDA driver lists no GPU".into(),
        });
    }
    Ok(count as usize)
}

fn nvrtc_error(call: &'static str, module: &str, code: rtc::nvrtcResult) -> Error {
    Error::Compiler {
        compiler: "nvrtc",
        call,
        module: module.to_string(),
        message: format!("{code:?}"),
    }
}

pub(crate) fn compiler_version() -> Result<String> {
    ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers; needs no device.
    let code = unsafe { rtc::nvrtcVersion(&mut major, &mut minor) };
    if code != rtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcVersion", "-", code));
    }
    Ok(format!("nvrtc {major}.{minor}"))
}

/// Owns an NVRTC program so every exit path destroys it.
struct NvrtcProgram(rtc::nvrtcProgram);

impl Drop for NvrtcProgram {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        unsafe { rtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

impl NvrtcProgram {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        if unsafe { rtc::nvrtcGetProgramLogSize(self.0, &mut size) }
            != rtc::nvrtcResult::NVRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes NVRTC asked for.
        unsafe { rtc::nvrtcGetProgramLog(self.0, buf.as_mut_ptr().cast()) };
        super::log_text(&buf)
    }
}

pub(crate) fn compile(
    module: &str,
    source: &str,
    arch: &str,
    options: &[String],
) -> Result<Vec<u8>> {
    ensure_nvrtc()?;
    let inputs = CompileInputs::new("nvrtc", module, source, options)?;
    let opt_ptrs = inputs.option_ptrs();
    let mut program: rtc::nvrtcProgram = ptr::null_mut();
    // SAFETY: valid C strings, no headers.
    let code = unsafe {
        rtc::nvrtcCreateProgram(
            &mut program,
            inputs.source.as_ptr(),
            inputs.name.as_ptr(),
            0,
            ptr::null(),
            ptr::null(),
        )
    };
    if code != rtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcCreateProgram", module, code));
    }
    let program = NvrtcProgram(program);
    // SAFETY: `opt_ptrs` holds valid C strings that outlive the call.
    let code =
        unsafe { rtc::nvrtcCompileProgram(program.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    if code != rtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::Compile {
            module: module.to_string(),
            arch: arch.to_string(),
            log: program.log(),
        });
    }
    let mut size = 0usize;
    // SAFETY: valid program and out-pointer; a real `sm_XY` arch makes NVRTC emit a cubin.
    let code = unsafe { rtc::nvrtcGetCUBINSize(program.0, &mut size) };
    if code != rtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcGetCUBINSize", module, code));
    }
    let mut image = vec![0u8; size];
    // SAFETY: `image` holds the `size` bytes NVRTC reported.
    let code = unsafe { rtc::nvrtcGetCUBIN(program.0, image.as_mut_ptr().cast()) };
    if code != rtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcGetCUBIN", module, code));
    }
    Ok(image)
}

/// One CUDA device, through its primary context (shared with any other CUDA user in the
/// process, as Candle's CUDA backend does). The context is made current before each call.
pub(crate) struct CudaDevice {
    ordinal: usize,
    context: cu::CUcontext,
    props: DeviceInfo,
}

// SAFETY: a CUcontext handle may be used from any thread once made current there, which
// `bind` does before every call.
unsafe impl Send for CudaDevice {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl Sync for CudaDevice {}

impl CudaDevice {
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::DeviceOutOfRange {
                platform: Platform::Nvidia,
                ordinal,
                count,
            });
        }
        init()?;
        let mut device: cu::CUdevice = 0;
        // SAFETY: valid out-pointer, ordinal in range.
        check("cuDeviceGet", unsafe {
            cu::cuDeviceGet(&mut device, ordinal as i32)
        })?;
        let attr = |a: cu::CUdevice_attribute| -> Result<i32> {
            let mut v = 0;
            // SAFETY: valid out-pointer and device.
            check("cuDeviceGetAttribute", unsafe {
                cu::cuDeviceGetAttribute(&mut v, a, device)
            })?;
            Ok(v)
        };
        use cu::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds 256 bytes, the length passed.
        check("cuDeviceGetName", unsafe {
            cu::cuDeviceGetName(name.as_mut_ptr(), 256, device)
        })?;
        let mut total = 0usize;
        // SAFETY: valid out-pointer.
        check("cuDeviceTotalMem", unsafe {
            cu::cuDeviceTotalMem_v2(&mut total, device)
        })?;
        let props = DeviceInfo {
            ordinal,
            platform: Platform::Nvidia,
            // SAFETY: cuDeviceGetName wrote a NUL-terminated string into `name`.
            name: unsafe { CStr::from_ptr(name.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
            arch: format!("sm_{major}{minor}"),
            warp_size: attr(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)? as u32,
            multiprocessor_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            // what a block may opt into (the launch opts in past the default 48 KiB), as AMD
            // reports the whole of a workgroup's LDS
            shared_mem_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as usize,
            max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32,
            total_memory: total,
        };
        let context = primary_context(ordinal, device)?;
        Ok(Self {
            ordinal,
            context,
            props,
        })
    }

    fn bind(&self) -> Result<()> {
        // SAFETY: the retained primary context stays alive until Drop.
        check("cuCtxSetCurrent", unsafe {
            cu::cuCtxSetCurrent(self.context)
        })
    }
}

/// The device's primary context, retained once for the life of the process, as HIP keeps its
/// devices' contexts: the driver does not destroy and re-create it as handles come and go.
fn primary_context(ordinal: usize, device: cu::CUdevice) -> Result<cu::CUcontext> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static RETAINED: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
    let mut retained = RETAINED.lock().unwrap_or_else(|p| p.into_inner());
    let contexts = retained.get_or_insert_with(HashMap::new);
    if let Some(&context) = contexts.get(&ordinal) {
        return Ok(context as cu::CUcontext);
    }
    let mut context: cu::CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointer and device; never released (the driver frees it at exit).
    check("cuDevicePrimaryCtxRetain", unsafe {
        cu::cuDevicePrimaryCtxRetain(&mut context, device)
    })?;
    contexts.insert(ordinal, context as usize);
    Ok(context)
}

fn stream(h: StreamHandle) -> cu::CUstream {
    h.0 as cu::CUstream
}
fn event(h: EventHandle) -> cu::CUevent {
    h.0 as cu::CUevent
}

impl RawDevice for CudaDevice {
    fn platform(&self) -> Platform {
        Platform::Nvidia
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn bind_thread(&self) -> Result<()> {
        self.bind()
    }
    fn props(&self) -> &DeviceInfo {
        &self.props
    }

    fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("cuMemGetInfo", unsafe {
            cu::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    fn malloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure> {
        self.bind().map_err(AllocFailure::Other)?;
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; bytes > 0 (pool invariant).
        let code = unsafe { cu::cuMemAlloc_v2(&mut p, bytes) };
        if code == cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(AllocFailure::OutOfMemory);
        }
        check("cuMemAlloc", code).map_err(AllocFailure::Other)?;
        Ok(p)
    }

    fn free(&self, p: DevicePtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `p` came from cuMemAlloc in this context and is freed once.
        check("cuMemFree", unsafe { cu::cuMemFree_v2(p) })
    }

    fn stream_create(&self) -> Result<StreamHandle> {
        self.bind()?;
        let mut s: cu::CUstream = ptr::null_mut();
        // SAFETY: valid out-pointer and flag.
        check("cuStreamCreate", unsafe {
            cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(StreamHandle(s as usize))
    }
    fn stream_destroy(&self, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: created here, destroyed once.
        check("cuStreamDestroy", unsafe {
            cu::cuStreamDestroy_v2(stream(s))
        })
    }
    fn stream_synchronize(&self, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream.
        check("cuStreamSynchronize", unsafe {
            cu::cuStreamSynchronize(stream(s))
        })
    }

    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` holds src.len() bytes (caller checked); `src` stays borrowed until
        // the synchronize below.
        check("cuMemcpyHtoDAsync", unsafe {
            cu::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), stream(s))
        })?;
        self.stream_synchronize(s)
    }
    fn host_alloc(&self, bytes: usize) -> Result<HostPtr, AllocFailure> {
        self.bind().map_err(AllocFailure::Other)?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer; bytes > 0 (caller's contract); flags 0: plain pinned.
        let code = unsafe { cu::cuMemHostAlloc(&mut p, bytes, 0) };
        if code == cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(AllocFailure::OutOfMemory);
        }
        check("cuMemHostAlloc", code).map_err(AllocFailure::Other)?;
        Ok(HostPtr(p as usize))
    }
    fn host_free(&self, p: HostPtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `p` came from cuMemHostAlloc in this context and is freed once.
        check("cuMemFreeHost", unsafe {
            cu::cuMemFreeHost(p.0 as *mut c_void)
        })
    }
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: HostPtr,
        bytes: usize,
        s: StreamHandle,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: the caller keeps `src` (page-locked, `bytes` long) untouched until the stream
        // passes the copy; `dst` holds `bytes` bytes (caller checked).
        check("cuMemcpyHtoDAsync", unsafe {
            cu::cuMemcpyHtoDAsync_v2(dst, src.0 as *const c_void, bytes, stream(s))
        })
    }
    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: `src` holds dst.len() bytes (caller checked); `dst` stays borrowed until
        // the synchronize below.
        check("cuMemcpyDtoHAsync", unsafe {
            cu::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, dst.len(), stream(s))
        })?;
        self.stream_synchronize(s)
    }
    fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: StreamHandle,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: both ranges hold `bytes` bytes (caller checked).
        check("cuMemcpyDtoDAsync", unsafe {
            cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream(s))
        })
    }
    fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` holds `bytes` bytes (caller checked).
        check("cuMemsetD8Async", unsafe {
            cu::cuMemsetD8Async(dst, value, bytes, stream(s))
        })
    }

    fn event_create(&self) -> Result<EventHandle> {
        self.bind()?;
        let mut e: cu::CUevent = ptr::null_mut();
        // SAFETY: valid out-pointer; default flags keep timing enabled.
        check("cuEventCreate", unsafe { cu::cuEventCreate(&mut e, 0) })?;
        Ok(EventHandle(e as usize))
    }
    fn event_record(&self, e: EventHandle, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: live event and stream of this context.
        check("cuEventRecord", unsafe {
            cu::cuEventRecord(event(e), stream(s))
        })
    }
    fn event_synchronize(&self, e: EventHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: a live event.
        check("cuEventSynchronize", unsafe {
            cu::cuEventSynchronize(event(e))
        })
    }
    fn event_query(&self, e: EventHandle) -> Result<bool> {
        self.bind()?;
        // SAFETY: a live event.
        let code = unsafe { cu::cuEventQuery(event(e)) };
        if code == cu::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check("cuEventQuery", code).map(|()| true)
    }
    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        self.bind()?;
        let mut ms = 0f32;
        // SAFETY: live events, valid out-pointer.
        check("cuEventElapsedTime", unsafe {
            cu::cuEventElapsedTime_v2(&mut ms, event(start), event(end))
        })?;
        Ok(ms)
    }
    fn event_destroy(&self, e: EventHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: destroyed once.
        check("cuEventDestroy", unsafe { cu::cuEventDestroy_v2(event(e)) })
    }

    fn module_load(&self, image: &[u8]) -> Result<ModuleHandle> {
        self.bind()?;
        let mut m: cu::CUmodule = ptr::null_mut();
        // SAFETY: `image` is a complete cubin from NVRTC; the driver copies it.
        check("cuModuleLoadData", unsafe {
            cu::cuModuleLoadData(&mut m, image.as_ptr().cast())
        })?;
        Ok(ModuleHandle(m as usize))
    }
    fn module_unload(&self, m: ModuleHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: loaded here, unloaded once.
        check("cuModuleUnload", unsafe {
            cu::cuModuleUnload(m.0 as cu::CUmodule)
        })
    }
    fn module_function(&self, m: ModuleHandle, name: &str) -> Result<Option<FunctionHandle>> {
        let Ok(cname) = CString::new(name) else {
            return Ok(None);
        };
        self.bind()?;
        let mut f: cu::CUfunction = ptr::null_mut();
        // SAFETY: live module, valid C string and out-pointer.
        let code = unsafe { cu::cuModuleGetFunction(&mut f, m.0 as cu::CUmodule, cname.as_ptr()) };
        if code == cu::CUresult::CUDA_ERROR_NOT_FOUND {
            return Ok(None);
        }
        check("cuModuleGetFunction", code)?;
        Ok(Some(FunctionHandle(f as usize)))
    }
    fn max_active_blocks(
        &self,
        function: FunctionHandle,
        block_threads: u32,
        shared_mem_bytes: u32,
    ) -> Result<u32> {
        self.bind()?;
        let mut blocks: i32 = 0;
        // SAFETY: a function of a loaded module; the count is written to the i32.
        check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            cu::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut blocks,
                function.0 as cu::CUfunction,
                block_threads as i32,
                shared_mem_bytes as usize,
            )
        })?;
        Ok(blocks.max(0) as u32)
    }
    fn launch(
        &self,
        function: FunctionHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        s: StreamHandle,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.bind()?;
        // past 48 KiB of shared memory, static and dynamic together, a launch opts in
        let mut static_bytes: i32 = 0;
        if shared_mem_bytes > 0 {
            // SAFETY: a function of a loaded module; the attribute is written to the i32.
            check("cuFuncGetAttribute", unsafe {
                cu::cuFuncGetAttribute(
                    &mut static_bytes,
                    cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                    function.0 as cu::CUfunction,
                )
            })?;
        }
        if shared_mem_bytes.saturating_add(static_bytes.max(0) as u32) > DEFAULT_SHARED_BYTES {
            // SAFETY: a function of a loaded module; the attribute takes a byte count.
            check("cuFuncSetAttribute", unsafe {
                cu::cuFuncSetAttribute(
                    function.0 as cu::CUfunction,
                    cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_mem_bytes as i32,
                )
            })?;
        }
        // SAFETY: `params` points at one value per kernel parameter, alive for the call (the
        // driver copies them at launch); dimensions were validated by the caller.
        check("cuLaunchKernel", unsafe {
            cu::cuLaunchKernel(
                function.0 as cu::CUfunction,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream(s),
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        })
    }

    fn begin_capture(&self, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream of this context; relaxed mode lets the pool allocate.
        check("cuStreamBeginCapture", unsafe {
            cu::cuStreamBeginCapture_v2(
                stream(s),
                cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        })
    }
    fn end_capture(&self, s: StreamHandle) -> Result<GraphHandle> {
        self.bind()?;
        let mut g: cu::CUgraph = ptr::null_mut();
        // SAFETY: a stream under capture, valid out-pointer.
        check("cuStreamEndCapture", unsafe {
            cu::cuStreamEndCapture(stream(s), &mut g)
        })?;
        Ok(GraphHandle(g as usize))
    }
    fn graph_instantiate(&self, g: GraphHandle) -> Result<GraphExecHandle> {
        self.bind()?;
        let mut exec: cu::CUgraphExec = ptr::null_mut();
        // SAFETY: a graph from end_capture, valid out-pointer, no flags.
        check("cuGraphInstantiateWithFlags", unsafe {
            cu::cuGraphInstantiateWithFlags(&mut exec, g.0 as cu::CUgraph, 0)
        })?;
        Ok(GraphExecHandle(exec as usize))
    }
    fn graph_launch(&self, exec: GraphExecHandle, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: a live executable graph and stream of this context.
        check("cuGraphLaunch", unsafe {
            cu::cuGraphLaunch(exec.0 as cu::CUgraphExec, stream(s))
        })
    }
    fn graph_exec_destroy(&self, exec: GraphExecHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: instantiated here, destroyed once.
        check("cuGraphExecDestroy", unsafe {
            cu::cuGraphExecDestroy(exec.0 as cu::CUgraphExec)
        })
    }
    fn graph_destroy(&self, g: GraphHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: captured here, destroyed once.
        check("cuGraphDestroy", unsafe {
            cu::cuGraphDestroy(g.0 as cu::CUgraph)
        })
    }
}
