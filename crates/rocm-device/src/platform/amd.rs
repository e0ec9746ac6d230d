//! The amd platform: libamdhip64 and hiprtc through `sys::hip` (cubecl-hip-sys's dynamically
//! loaded bindings, and the ABI facts the AMD tier checks against the ROCm 6.4 headers).

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

pub(crate) use crate::sys::hip::library_status as libraries;
use crate::sys::hip::{abi, sys as hip, HINT};

use super::{
    AllocFailure, CompileInputs, DeviceInfo, DevicePtr, EventHandle, FunctionHandle,
    GraphExecHandle, GraphHandle, HostPtr, ModuleHandle, Platform, RawDevice, StreamHandle,
};
use crate::error::{Error, Result};

/// Checked before any binding call: the bindings panic when the library is missing.
fn ensure_loaded() -> Result<()> {
    if hip::is_available() {
        return Ok(());
    }
    for lib in libraries() {
        lib.require()?;
    }
    Err(Error::LibraryMissing {
        library: "HIP runtime",
        tried: "libamdhip64.so and libhiprtc.so through cubecl-hip-sys".into(),
        hint: HINT,
    })
}

fn c_string(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: HIP returns static NUL-terminated strings for error names and messages.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

fn check(call: &'static str, code: hip::hipError_t) -> Result<()> {
    if code == abi::HIP_SUCCESS {
        return Ok(());
    }
    // SAFETY: error-name queries take any code and return static strings.
    let (name, message) = unsafe { (hip::hipGetErrorName(code), hip::hipGetErrorString(code)) };
    Err(Error::Driver {
        platform: Platform::Amd,
        call,
        code: i64::from(code),
        name: c_string(name),
        message: c_string(message),
    })
}

fn init() -> Result<()> {
    ensure_loaded()?;
    // SAFETY: hipInit takes flags 0 and may be called repeatedly.
    check("hipInit", unsafe { hip::hipInit(0) })
}

pub(crate) fn device_count() -> Result<usize> {
    ensure_loaded()?;
    // SAFETY: library loaded (checked above); hipInit(0) is idempotent.
    let code = unsafe { hip::hipInit(0) };
    if code == abi::HIP_ERROR_NO_DEVICE {
        return Err(no_device(code));
    }
    check("hipInit", code)?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    let code = unsafe { hip::hipGetDeviceCount(&mut count) };
    if code == abi::HIP_ERROR_NO_DEVICE || (code == abi::HIP_SUCCESS && count <= 0) {
        return Err(no_device(code));
    }
    check("hipGetDeviceCount", code)?;
    Ok(usize::try_from(count).unwrap_or(0))
}

fn no_device(code: u32) -> Error {
    Error::NoDevice {
        platform: Platform::Amd,
        detail: format!(
            "the HIP runtime loaded but reports no GPU (status {code}); check that the amdgpu \
             driver is loaded and /dev/kfd is accessible"
        ),
    }
}

pub(crate) fn compiler_version() -> Result<String> {
    ensure_loaded()?;
    let (mut major, mut minor, mut runtime) = (0, 0, 0);
    // SAFETY: out-pointers are valid; neither call needs a device.
    let rtc = unsafe { hip::hiprtcVersion(&mut major, &mut minor) };
    if rtc != abi::HIPRTC_SUCCESS {
        return Err(rtc_error("hiprtcVersion", "-", rtc));
    }
    // SAFETY: valid out-pointer.
    let code = unsafe { hip::hipRuntimeGetVersion(&mut runtime) };
    check("hipRuntimeGetVersion", code)?;
    Ok(format!("hiprtc {major}.{minor} (HIP runtime {runtime})"))
}

fn rtc_error(call: &'static str, module: &str, code: hip::hiprtcResult) -> Error {
    Error::Compiler {
        compiler: "hiprtc",
        call,
        module: module.to_string(),
        message: format!("status {code}"),
    }
}

/// Owns a hiprtc program so every exit path destroys it.
struct RtcProgram(hip::hiprtcProgram);

impl Drop for RtcProgram {
    fn drop(&mut self) {
        // SAFETY: the program was created by hiprtcCreateProgram and is destroyed once.
        unsafe { hip::hiprtcDestroyProgram(&mut self.0) };
    }
}

impl RtcProgram {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        if unsafe { hip::hiprtcGetProgramLogSize(self.0, &mut size) } != abi::HIPRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds `size` bytes, the size hiprtc asked for.
        unsafe { hip::hiprtcGetProgramLog(self.0, buf.as_mut_ptr().cast()) };
        super::log_text(&buf)
    }
}

pub(crate) fn compile(
    module: &str,
    source: &str,
    arch: &str,
    options: &[String],
) -> Result<Vec<u8>> {
    ensure_loaded()?;
    let inputs = CompileInputs::new("hiprtc", module, source, options)?;
    let opt_ptrs = inputs.option_ptrs();
    let mut program: hip::hiprtcProgram = ptr::null_mut();
    // SAFETY: valid C strings; no extra headers.
    let code = unsafe {
        hip::hiprtcCreateProgram(
            &mut program,
            inputs.source.as_ptr(),
            inputs.name.as_ptr(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if code != abi::HIPRTC_SUCCESS {
        return Err(rtc_error("hiprtcCreateProgram", module, code));
    }
    let program = RtcProgram(program);
    let n_opts = i32::try_from(opt_ptrs.len()).unwrap_or(i32::MAX);
    // SAFETY: `opt_ptrs` holds `n_opts` valid C strings that outlive the call.
    let code = unsafe { hip::hiprtcCompileProgram(program.0, n_opts, opt_ptrs.as_ptr()) };
    if code != abi::HIPRTC_SUCCESS {
        return Err(Error::Compile {
            module: module.to_string(),
            arch: arch.to_string(),
            log: program.log(),
        });
    }
    let mut size = 0usize;
    // SAFETY: valid program and out-pointer.
    let code = unsafe { hip::hiprtcGetCodeSize(program.0, &mut size) };
    if code != abi::HIPRTC_SUCCESS {
        return Err(rtc_error("hiprtcGetCodeSize", module, code));
    }
    let mut image = vec![0u8; size];
    // SAFETY: `image` holds the `size` bytes hiprtc reported.
    let code = unsafe { hip::hiprtcGetCode(program.0, image.as_mut_ptr().cast()) };
    if code != abi::HIPRTC_SUCCESS {
        return Err(rtc_error("hiprtcGetCode", module, code));
    }
    Ok(image)
}

/// One HIP device. HIP's current device is per host thread, so each call binds it first.
pub(crate) struct HipDevice {
    ordinal: usize,
    props: DeviceInfo,
}

fn fixed_c_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl HipDevice {
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::DeviceOutOfRange {
                platform: Platform::Amd,
                ordinal,
                count,
            });
        }
        init()?;
        let id = ordinal as i32;
        // SAFETY: hipDeviceProp_tR0600 is a plain C struct; all-zero is a valid value.
        let mut props: hip::hipDeviceProp_tR0600 = unsafe { std::mem::zeroed() };
        // SAFETY: `props` is a valid out-pointer of the R0600 layout this entry point fills.
        check("hipGetDevicePropertiesR0600", unsafe {
            hip::hipGetDevicePropertiesR0600(&mut props, id)
        })?;
        let props = DeviceInfo {
            ordinal,
            platform: Platform::Amd,
            name: fixed_c_string(&props.name),
            arch: fixed_c_string(&props.gcnArchName),
            warp_size: props.warpSize as u32,
            multiprocessor_count: props.multiProcessorCount as u32,
            shared_mem_per_block: props.sharedMemPerBlock,
            max_threads_per_block: props.maxThreadsPerBlock as u32,
            total_memory: props.totalGlobalMem,
        };
        Ok(Self { ordinal, props })
    }

    fn bind(&self) -> Result<()> {
        // SAFETY: the ordinal was validated in `open`.
        check("hipSetDevice", unsafe {
            hip::hipSetDevice(self.ordinal as i32)
        })
    }
}

fn dptr(p: DevicePtr) -> hip::hipDeviceptr_t {
    p as usize as hip::hipDeviceptr_t
}
fn stream(h: StreamHandle) -> hip::hipStream_t {
    h.0 as hip::hipStream_t
}
fn event(h: EventHandle) -> hip::hipEvent_t {
    h.0 as hip::hipEvent_t
}

impl RawDevice for HipDevice {
    fn platform(&self) -> Platform {
        Platform::Amd
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
        check("hipMemGetInfo", unsafe {
            hip::hipMemGetInfo(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    fn malloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure> {
        self.bind().map_err(AllocFailure::Other)?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer; `bytes` > 0 is ensured by the pool.
        let code = unsafe { hip::hipMalloc(&mut p, bytes) };
        if code == abi::HIP_ERROR_OUT_OF_MEMORY {
            return Err(AllocFailure::OutOfMemory);
        }
        check("hipMalloc", code).map_err(AllocFailure::Other)?;
        Ok(p as usize as DevicePtr)
    }

    fn free(&self, p: DevicePtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `p` came from hipMalloc on this device and is freed once (pool invariant).
        check("hipFree", unsafe { hip::hipFree(dptr(p)) })
    }

    fn stream_create(&self) -> Result<StreamHandle> {
        self.bind()?;
        let mut s: hip::hipStream_t = ptr::null_mut();
        // SAFETY: valid out-pointer and flag.
        check("hipStreamCreateWithFlags", unsafe {
            hip::hipStreamCreateWithFlags(&mut s, abi::HIP_STREAM_NON_BLOCKING)
        })?;
        Ok(StreamHandle(s as usize))
    }
    fn stream_destroy(&self, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: the stream was created on this device and is destroyed once.
        check("hipStreamDestroy", unsafe {
            hip::hipStreamDestroy(stream(s))
        })
    }
    fn stream_synchronize(&self, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream handle.
        check("hipStreamSynchronize", unsafe {
            hip::hipStreamSynchronize(stream(s))
        })
    }

    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` holds at least src.len() bytes (checked by the caller); `src` is
        // borrowed until the stream synchronize below, so pageable staging is complete.
        check("hipMemcpyHtoDAsync", unsafe {
            hip::hipMemcpyHtoDAsync(dptr(dst), src.as_ptr() as *mut c_void, src.len(), stream(s))
        })?;
        self.stream_synchronize(s)
    }
    fn host_alloc(&self, bytes: usize) -> Result<HostPtr, AllocFailure> {
        self.bind().map_err(AllocFailure::Other)?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer; bytes > 0 (caller's contract); the default flags.
        let code = unsafe { hip::hipHostMalloc(&mut p, bytes, abi::HIP_HOST_MALLOC_DEFAULT) };
        if code == abi::HIP_ERROR_OUT_OF_MEMORY {
            return Err(AllocFailure::OutOfMemory);
        }
        check("hipHostMalloc", code).map_err(AllocFailure::Other)?;
        Ok(HostPtr(p as usize))
    }
    fn host_free(&self, p: HostPtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `p` came from hipHostMalloc and is freed once.
        check("hipHostFree", unsafe {
            hip::hipHostFree(p.0 as *mut c_void)
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
        check("hipMemcpyHtoDAsync", unsafe {
            hip::hipMemcpyHtoDAsync(dptr(dst), src.0 as *mut c_void, bytes, stream(s))
        })
    }
    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: `src` holds at least dst.len() bytes (checked by the caller); `dst` is
        // borrowed mutably until the synchronize below.
        check("hipMemcpyDtoHAsync", unsafe {
            hip::hipMemcpyDtoHAsync(dst.as_mut_ptr().cast(), dptr(src), dst.len(), stream(s))
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
        // SAFETY: both ranges hold `bytes` bytes (checked by the caller).
        check("hipMemcpyDtoDAsync", unsafe {
            hip::hipMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, stream(s))
        })
    }
    fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` holds `bytes` bytes (checked by the caller).
        check("hipMemsetD8Async", unsafe {
            hip::hipMemsetD8Async(dptr(dst), value, bytes, stream(s))
        })
    }

    fn event_create(&self) -> Result<EventHandle> {
        self.bind()?;
        let mut e: hip::hipEvent_t = ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipEventCreate", unsafe { hip::hipEventCreate(&mut e) })?;
        Ok(EventHandle(e as usize))
    }
    fn event_record(&self, e: EventHandle, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: live event and stream of this device.
        check("hipEventRecord", unsafe {
            hip::hipEventRecord(event(e), stream(s))
        })
    }
    fn event_synchronize(&self, e: EventHandle) -> Result<()> {
        // SAFETY: a live event.
        check("hipEventSynchronize", unsafe {
            hip::hipEventSynchronize(event(e))
        })
    }
    fn event_query(&self, e: EventHandle) -> Result<bool> {
        self.bind()?;
        // SAFETY: a live event.
        let code = unsafe { hip::hipEventQuery(event(e)) };
        if code == abi::HIP_ERROR_NOT_READY {
            return Ok(false);
        }
        check("hipEventQuery", code).map(|()| true)
    }
    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: live events; valid out-pointer.
        check("hipEventElapsedTime", unsafe {
            hip::hipEventElapsedTime(&mut ms, event(start), event(end))
        })?;
        Ok(ms)
    }
    fn event_destroy(&self, e: EventHandle) -> Result<()> {
        // SAFETY: the event is destroyed once.
        check("hipEventDestroy", unsafe { hip::hipEventDestroy(event(e)) })
    }

    fn module_load(&self, image: &[u8]) -> Result<ModuleHandle> {
        self.bind()?;
        let mut m: hip::hipModule_t = ptr::null_mut();
        // SAFETY: `image` is a complete code object produced by hiprtc; HIP copies it.
        check("hipModuleLoadData", unsafe {
            hip::hipModuleLoadData(&mut m, image.as_ptr().cast())
        })?;
        Ok(ModuleHandle(m as usize))
    }
    fn module_unload(&self, m: ModuleHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: the module was loaded on this device and is unloaded once.
        check("hipModuleUnload", unsafe {
            hip::hipModuleUnload(m.0 as hip::hipModule_t)
        })
    }
    fn module_function(&self, m: ModuleHandle, name: &str) -> Result<Option<FunctionHandle>> {
        let Ok(cname) = CString::new(name) else {
            return Ok(None);
        };
        self.bind()?;
        let mut f: hip::hipFunction_t = ptr::null_mut();
        // SAFETY: live module, valid C string and out-pointer.
        let code =
            unsafe { hip::hipModuleGetFunction(&mut f, m.0 as hip::hipModule_t, cname.as_ptr()) };
        if code == abi::HIP_ERROR_NOT_FOUND {
            return Ok(None);
        }
        check("hipModuleGetFunction", code)?;
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
        let code = unsafe {
            hip::hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut blocks,
                function.0 as hip::hipFunction_t,
                block_threads as i32,
                shared_mem_bytes as usize,
            )
        };
        check("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", code)?;
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
        // SAFETY: `params` points at one value per kernel parameter, alive for the call (HIP
        // copies them at launch); the caller validated the launch dimensions.
        check("hipModuleLaunchKernel", unsafe {
            hip::hipModuleLaunchKernel(
                function.0 as hip::hipFunction_t,
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
        // SAFETY: a live stream of this device; relaxed mode lets the pool allocate.
        check("hipStreamBeginCapture", unsafe {
            hip::hipStreamBeginCapture(stream(s), abi::HIP_STREAM_CAPTURE_MODE_RELAXED)
        })
    }
    fn end_capture(&self, s: StreamHandle) -> Result<GraphHandle> {
        self.bind()?;
        let mut g: hip::hipGraph_t = ptr::null_mut();
        // SAFETY: a stream under capture, valid out-pointer.
        check("hipStreamEndCapture", unsafe {
            hip::hipStreamEndCapture(stream(s), &mut g)
        })?;
        Ok(GraphHandle(g as usize))
    }
    fn graph_instantiate(&self, g: GraphHandle) -> Result<GraphExecHandle> {
        self.bind()?;
        let mut exec: hip::hipGraphExec_t = ptr::null_mut();
        // SAFETY: a graph from end_capture; no error node or log buffer is asked for.
        check("hipGraphInstantiate", unsafe {
            hip::hipGraphInstantiate(
                &mut exec,
                g.0 as hip::hipGraph_t,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        })?;
        Ok(GraphExecHandle(exec as usize))
    }
    fn graph_launch(&self, exec: GraphExecHandle, s: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: a live executable graph and stream of this device.
        check("hipGraphLaunch", unsafe {
            hip::hipGraphLaunch(exec.0 as hip::hipGraphExec_t, stream(s))
        })
    }
    fn graph_exec_destroy(&self, exec: GraphExecHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: instantiated here, destroyed once.
        check("hipGraphExecDestroy", unsafe {
            hip::hipGraphExecDestroy(exec.0 as hip::hipGraphExec_t)
        })
    }
    fn graph_destroy(&self, g: GraphHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: captured here, destroyed once.
        check("hipGraphDestroy", unsafe {
            hip::hipGraphDestroy(g.0 as hip::hipGraph_t)
        })
    }
}
