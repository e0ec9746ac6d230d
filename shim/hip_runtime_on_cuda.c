// libamdhip64.so for the verification mode `--amd-shim`: exactly the HIP runtime entry points
// the project's amd platform calls (rocm-device's platform/amd.rs, through cubecl-hip-sys), on
// top of the CUDA driver. Built against the ROCm headers (-D__HIP_PLATFORM_AMD__), so every
// signature, enum value and the hipDeviceProp_tR0600 layout it fills are AMD's: the compiler
// checks each definition against the header's declaration.
//
// The device it presents is an AMD one: CANDLE_ROCM_SHIM_ARCH (default gfx942:sramecc+:xnack-,
// an MI300X) names it; gfx9 targets run 64-lane wavefronts, which the kernels get through the
// hiprtc shim's wave64 emulation (two CUDA warps a wavefront, at most 8 wavefronts a block).
// An entry point the project calls that is not here makes cubecl-hip-sys fail with its name.
#include <hip/hip_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "cuda_loader.h"

static struct shim_cuda cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static CUresult init_status;

static void load_once(void) {
    shim_load_cuda(&cu);
    init_status = cu.cuInit(0);
}

static CUresult ensure_loaded(void) {
    pthread_once(&cu_once, load_once);
    return init_status;
}

// The CUDA error of the last failed call on this thread, for hipGetErrorString.
static __thread CUresult last_cuda_error;

static hipError_t translate(CUresult r) {
    if (r != SHIM_CUDA_SUCCESS) last_cuda_error = r;
    switch (r) {
    case SHIM_CUDA_SUCCESS: return hipSuccess;
    case SHIM_CUDA_ERROR_INVALID_VALUE: return hipErrorInvalidValue;
    case SHIM_CUDA_ERROR_OUT_OF_MEMORY: return hipErrorOutOfMemory;
    case SHIM_CUDA_ERROR_NOT_INITIALIZED: return hipErrorNotInitialized;
    case SHIM_CUDA_ERROR_NO_DEVICE: return hipErrorNoDevice;
    case SHIM_CUDA_ERROR_INVALID_DEVICE: return hipErrorInvalidDevice;
    case SHIM_CUDA_ERROR_INVALID_IMAGE: return hipErrorInvalidImage;
    case SHIM_CUDA_ERROR_INVALID_CONTEXT: return hipErrorInvalidContext;
    case SHIM_CUDA_ERROR_NO_BINARY_FOR_GPU: return hipErrorNoBinaryForGpu;
    case SHIM_CUDA_ERROR_INVALID_HANDLE: return hipErrorInvalidHandle;
    case SHIM_CUDA_ERROR_NOT_FOUND: return hipErrorNotFound;
    case SHIM_CUDA_ERROR_NOT_READY: return hipErrorNotReady;
    case SHIM_CUDA_ERROR_ILLEGAL_ADDRESS: return hipErrorIllegalAddress;
    case SHIM_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return hipErrorLaunchOutOfResources;
    case SHIM_CUDA_ERROR_LAUNCH_TIMEOUT: return hipErrorLaunchTimeOut;
    case SHIM_CUDA_ERROR_LAUNCH_FAILED: return hipErrorLaunchFailure;
    case SHIM_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return hipErrorStreamCaptureUnsupported;
    case SHIM_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return hipErrorStreamCaptureInvalidated;
    case SHIM_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return hipErrorStreamCaptureImplicit;
    case SHIM_CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return hipErrorStreamCaptureWrongThread;
    default: return hipErrorUnknown;
    }
}

// Every code `translate` produces, with HIP's name for it.
#define SHIM_HIP_ERRORS(E)                                                                     \
    E(hipSuccess) E(hipErrorInvalidValue) E(hipErrorOutOfMemory) E(hipErrorNotInitialized)     \
    E(hipErrorNoDevice) E(hipErrorInvalidDevice) E(hipErrorInvalidImage)                       \
    E(hipErrorInvalidContext) E(hipErrorNoBinaryForGpu) E(hipErrorInvalidHandle)               \
    E(hipErrorNotFound) E(hipErrorNotReady) E(hipErrorIllegalAddress)                          \
    E(hipErrorLaunchOutOfResources) E(hipErrorLaunchTimeOut) E(hipErrorLaunchFailure)          \
    E(hipErrorInvalidConfiguration) E(hipErrorStreamCaptureUnsupported)                       \
    E(hipErrorStreamCaptureInvalidated) E(hipErrorStreamCaptureImplicit)                       \
    E(hipErrorStreamCaptureWrongThread) E(hipErrorUnknown)

const char* hipGetErrorName(hipError_t e) {
#define SHIM_NAME(code) \
    if (e == code) return #code;
    SHIM_HIP_ERRORS(SHIM_NAME)
#undef SHIM_NAME
    return "hipErrorUnknown";
}

const char* hipGetErrorString(hipError_t e) {
    // The CUDA driver's text for the failure behind the code, where it was this thread's last.
    static __thread char text[256];
    const char* name = NULL;
    const char* message = NULL;
    if (e != hipSuccess && last_cuda_error != SHIM_CUDA_SUCCESS && translate(last_cuda_error) == e &&
        ensure_loaded() == SHIM_CUDA_SUCCESS) {
        cu.cuGetErrorName(last_cuda_error, &name);
        cu.cuGetErrorString(last_cuda_error, &message);
    }
    snprintf(text, sizeof text, "%s (through the HIP shim: CUDA %s: %s)", hipGetErrorName(e),
             name ? name : "-", message ? message : "-");
    return text;
}

// The HIP device the shim presents.
static const char* shim_arch(void) {
    const char* a = getenv("CANDLE_ROCM_SHIM_ARCH");
    return a && *a ? a : "gfx942:sramecc+:xnack-";
}

// gfx9 (GCN and CDNA) runs 64-lane wavefronts; RDNA (gfx10 and later) 32.
static int shim_wave64(void) { return strncmp(shim_arch(), "gfx9", 4) == 0; }

// At most 8 emulated wavefronts a block (compat.h's CANDLE_ROCM_WAVE64_MAX_WAVES) and the
// shared memory its lane-exchange slots leave.
enum { SHIM_WAVE64_MAX_THREADS = 8 * 64, SHIM_WAVE64_SLOT_BYTES = 8 * 64 * 8 };

// HIP's current device is a property of the host thread: the device's primary context, made
// current on the calling thread. Calls before any hipSetDevice use device 0, as HIP does.
static CUresult ensure_context(void) {
    CUresult r = ensure_loaded();
    if (r != SHIM_CUDA_SUCCESS) return r;
    CUcontext ctx = NULL;
    r = cu.cuCtxGetCurrent(&ctx);
    if (r != SHIM_CUDA_SUCCESS || ctx) return r;
    CUdevice dev;
    if ((r = cu.cuDeviceGet(&dev, 0)) != SHIM_CUDA_SUCCESS) return r;
    if ((r = cu.cuDevicePrimaryCtxRetain(&ctx, dev)) != SHIM_CUDA_SUCCESS) return r;
    return cu.cuCtxSetCurrent(ctx);
}

#define SHIM_TRY(call)                         \
    do {                                       \
        CUresult shim_r = (call);              \
        if (shim_r != SHIM_CUDA_SUCCESS)       \
            return translate(shim_r);          \
    } while (0)

hipError_t hipInit(unsigned int flags) {
    if (flags != 0) return hipErrorInvalidValue;
    return translate(ensure_loaded());
}

hipError_t hipRuntimeGetVersion(int* version) {
    if (!version) return hipErrorInvalidValue;
    // HIP_VERSION of the headers the shim was built against.
    *version = HIP_VERSION;
    return hipSuccess;
}

hipError_t hipGetDeviceCount(int* count) {
    if (!count) return hipErrorInvalidValue;
    SHIM_TRY(ensure_loaded());
    return translate(cu.cuDeviceGetCount(count));
}

hipError_t hipSetDevice(int id) {
    SHIM_TRY(ensure_loaded());
    CUdevice dev;
    CUcontext ctx;
    SHIM_TRY(cu.cuDeviceGet(&dev, id));
    // Retained once per device for the process, as HIP keeps its devices.
    SHIM_TRY(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
    return translate(cu.cuCtxSetCurrent(ctx));
}

hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600* prop, int id) {
    if (!prop) return hipErrorInvalidValue;
    SHIM_TRY(ensure_loaded());
    CUdevice dev;
    SHIM_TRY(cu.cuDeviceGet(&dev, id));
    memset(prop, 0, sizeof *prop);
    SHIM_TRY(cu.cuDeviceGetName(prop->name, (int)sizeof prop->name, dev));
    SHIM_TRY(cu.cuDeviceTotalMem_v2(&prop->totalGlobalMem, dev));
    int shared = 0, threads = 0;
    // what a block may opt into (a launch past the default opts in), as AMD reports the whole of
    // a workgroup's LDS
    SHIM_TRY(cu.cuDeviceGetAttribute(&shared, SHIM_CU_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    SHIM_TRY(cu.cuDeviceGetAttribute(&threads, SHIM_CU_MAX_THREADS_PER_BLOCK, dev));
    if (shim_wave64()) {
        prop->warpSize = 64;
        prop->maxThreadsPerBlock = threads < SHIM_WAVE64_MAX_THREADS ? threads : SHIM_WAVE64_MAX_THREADS;
        prop->sharedMemPerBlock = (size_t)shared - SHIM_WAVE64_SLOT_BYTES;
    } else {
        prop->warpSize = 32;
        prop->maxThreadsPerBlock = threads;
        prop->sharedMemPerBlock = (size_t)shared;
    }
    const struct {
        int* field;
        int attribute;
    } attrs[] = {
        {&prop->maxThreadsDim[0], SHIM_CU_MAX_BLOCK_DIM_X},
        {&prop->maxThreadsDim[1], SHIM_CU_MAX_BLOCK_DIM_Y},
        {&prop->maxThreadsDim[2], SHIM_CU_MAX_BLOCK_DIM_Z},
        {&prop->maxGridSize[0], SHIM_CU_MAX_GRID_DIM_X},
        {&prop->maxGridSize[1], SHIM_CU_MAX_GRID_DIM_Y},
        {&prop->maxGridSize[2], SHIM_CU_MAX_GRID_DIM_Z},
        {&prop->regsPerBlock, SHIM_CU_MAX_REGISTERS_PER_BLOCK},
        {&prop->clockRate, SHIM_CU_CLOCK_RATE},
        {&prop->multiProcessorCount, SHIM_CU_MULTIPROCESSOR_COUNT},
        {&prop->pciBusID, SHIM_CU_PCI_BUS_ID},
        {&prop->pciDeviceID, SHIM_CU_PCI_DEVICE_ID},
        {&prop->pciDomainID, SHIM_CU_PCI_DOMAIN_ID},
        {&prop->l2CacheSize, SHIM_CU_L2_CACHE_SIZE},
        {&prop->maxThreadsPerMultiProcessor, SHIM_CU_MAX_THREADS_PER_MULTIPROCESSOR},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; ++i)
        SHIM_TRY(cu.cuDeviceGetAttribute(attrs[i].field, attrs[i].attribute, dev));
    for (int d = 0; d < 3; ++d)
        if (prop->maxThreadsDim[d] > prop->maxThreadsPerBlock) prop->maxThreadsDim[d] = prop->maxThreadsPerBlock;
    int constant = 0;
    SHIM_TRY(cu.cuDeviceGetAttribute(&constant, SHIM_CU_TOTAL_CONSTANT_MEMORY, dev));
    prop->totalConstMem = (size_t)constant;
    // gfxMAJOR MINOR STEPPING, as HIP reports major.minor (gfx942: 9.4).
    const char* arch = shim_arch();
    snprintf(prop->gcnArchName, sizeof prop->gcnArchName, "%s", arch);
    int major = 0, minor = 0;
    int n = 0;
    if (sscanf(arch, "gfx%d", &n) == 1) {
        // three or four digits (gfx942, gfx1100), or two and a letter stepping (gfx90a)
        major = n >= 100 ? n / 100 : n / 10;
        minor = n >= 100 ? (n / 10) % 10 : n % 10;
    }
    prop->major = major;
    prop->minor = minor;
    return hipSuccess;
}

hipError_t hipMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemGetInfo_v2(free_bytes, total_bytes));
}

hipError_t hipMalloc(void** ptr, size_t size) {
    if (!ptr) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    CUdeviceptr p = 0;
    // HIP returns success and a null pointer for zero bytes; CUDA refuses them.
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    SHIM_TRY(cu.cuMemAlloc_v2(&p, size));
    *ptr = (void*)(uintptr_t)p;
    return hipSuccess;
}

hipError_t hipFree(void* ptr) {
    if (!ptr) return hipSuccess;
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr));
}

hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags) {
    if (!ptr) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    // Only the default (plain page-locked memory) is asked for; other flags are refused.
    if (flags != hipHostMallocDefault) return hipErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    return translate(cu.cuMemHostAlloc(ptr, size, 0));
}

hipError_t hipHostFree(void* ptr) {
    if (!ptr) return hipSuccess;
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemFreeHost(ptr));
}

hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
    if (!stream) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    // hipStreamNonBlocking and CU_STREAM_NON_BLOCKING are both 1; no other flag is defined.
    if (flags & ~(unsigned)hipStreamNonBlocking) return hipErrorInvalidValue;
    CUstream s = NULL;
    SHIM_TRY(cu.cuStreamCreate(&s, flags));
    *stream = (hipStream_t)s;
    return hipSuccess;
}

hipError_t hipStreamDestroy(hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuStreamDestroy_v2((CUstream)stream));
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuStreamSynchronize((CUstream)stream));
}

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t bytes, hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemcpyHtoDAsync_v2((CUdeviceptr)(uintptr_t)dst, src, bytes, (CUstream)stream));
}

hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t bytes, hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)(uintptr_t)src, bytes, (CUstream)stream));
}

hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t bytes, hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemcpyDtoDAsync_v2((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes,
                                             (CUstream)stream));
}

hipError_t hipMemsetD8Async(hipDeviceptr_t dst, unsigned char value, size_t count, hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, value, count, (CUstream)stream));
}

hipError_t hipEventCreate(hipEvent_t* event) {
    if (!event) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    CUevent e = NULL;
    SHIM_TRY(cu.cuEventCreate(&e, 0));
    *event = (hipEvent_t)e;
    return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t event) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuEventDestroy_v2((CUevent)event));
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuEventRecord((CUevent)event, (CUstream)stream));
}

hipError_t hipEventSynchronize(hipEvent_t event) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuEventSynchronize((CUevent)event));
}

hipError_t hipEventQuery(hipEvent_t event) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuEventQuery((CUevent)event));
}

hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
    if (!ms) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    return translate(cu.cuEventElapsedTime(ms, (CUevent)start, (CUevent)stop));
}

hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
    if (!module || !image) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    CUmodule m = NULL;
    SHIM_TRY(cu.cuModuleLoadData(&m, image));
    *module = (hipModule_t)m;
    return hipSuccess;
}

hipError_t hipModuleUnload(hipModule_t module) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuModuleUnload((CUmodule)module));
}

hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* name) {
    if (!function || !name) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    CUfunction f = NULL;
    SHIM_TRY(cu.cuModuleGetFunction(&f, (CUmodule)module, name));
    *function = (hipFunction_t)f;
    return hipSuccess;
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                 unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                 unsigned int shared_bytes, hipStream_t stream, void** params, void** extra) {
    SHIM_TRY(ensure_context());
    // The emulated wavefronts hold at most 8 a block: a larger block is AMD's launch error.
    if (shim_wave64() && (unsigned long long)block_x * block_y * block_z > SHIM_WAVE64_MAX_THREADS)
        return hipErrorInvalidConfiguration;
    // past 48 KiB of shared memory, static and dynamic together, a launch opts in
    int static_bytes = 0;
    if (shared_bytes > 0)
        SHIM_TRY(cu.cuFuncGetAttribute(&static_bytes, SHIM_CU_FUNC_SHARED_SIZE_BYTES, (CUfunction)f));
    if ((unsigned long long)shared_bytes + (unsigned)(static_bytes > 0 ? static_bytes : 0) > SHIM_CU_DEFAULT_SHARED_BYTES)
        SHIM_TRY(cu.cuFuncSetAttribute((CUfunction)f, SHIM_CU_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared_bytes));
    return translate(cu.cuLaunchKernel((CUfunction)f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                       shared_bytes, (CUstream)stream, params, extra));
}

hipError_t hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, hipFunction_t f, int block_size,
                                                              size_t dynamic_shared_bytes) {
    if (!blocks || block_size <= 0) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    return translate(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (CUfunction)f, block_size,
                                                                     dynamic_shared_bytes));
}

// Stream capture and graphs: hipStreamCaptureMode and CUstreamCaptureMode share their values
// (global 0, thread-local 1, relaxed 2), as do the capture error codes (900-908).
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuStreamBeginCapture_v2((CUstream)stream, (int)mode));
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* graph) {
    if (!graph) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    CUgraph g = NULL;
    SHIM_TRY(cu.cuStreamEndCapture((CUstream)stream, &g));
    *graph = (hipGraph_t)g;
    return hipSuccess;
}

hipError_t hipGraphInstantiate(hipGraphExec_t* exec, hipGraph_t graph, hipGraphNode_t* error_node,
                               char* log, size_t log_size) {
    if (!exec) return hipErrorInvalidValue;
    SHIM_TRY(ensure_context());
    if (error_node) *error_node = NULL;
    if (log && log_size) log[0] = 0;
    CUgraphExec e = NULL;
    SHIM_TRY(cu.cuGraphInstantiateWithFlags(&e, (CUgraph)graph, 0));
    *exec = (hipGraphExec_t)e;
    return hipSuccess;
}

hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuGraphLaunch((CUgraphExec)exec, (CUstream)stream));
}

hipError_t hipGraphExecDestroy(hipGraphExec_t exec) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuGraphExecDestroy((CUgraphExec)exec));
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
    SHIM_TRY(ensure_context());
    return translate(cu.cuGraphDestroy((CUgraph)graph));
}
