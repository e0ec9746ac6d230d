// The CUDA driver and NVRTC entry points the HIP shim calls, declared here (no CUDA headers are
// needed to build it) and loaded at run time, as the project loads every vendor library.
// Handles are opaque pointers; CUdeviceptr is 64-bit on every platform CUDA supports.
#ifndef CANDLE_ROCM_SHIM_CUDA_LOADER_H
#define CANDLE_ROCM_SHIM_CUDA_LOADER_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUgraph;
typedef void* CUgraphExec;
typedef int nvrtcResult;
typedef void* nvrtcProgram;

// CUdevice_attribute values the shim reads (cuda.h).
enum {
    SHIM_CU_MAX_THREADS_PER_BLOCK = 1,
    SHIM_CU_MAX_BLOCK_DIM_X = 2,
    SHIM_CU_MAX_BLOCK_DIM_Y = 3,
    SHIM_CU_MAX_BLOCK_DIM_Z = 4,
    SHIM_CU_MAX_GRID_DIM_X = 5,
    SHIM_CU_MAX_GRID_DIM_Y = 6,
    SHIM_CU_MAX_GRID_DIM_Z = 7,
    SHIM_CU_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    SHIM_CU_TOTAL_CONSTANT_MEMORY = 9,
    SHIM_CU_MAX_REGISTERS_PER_BLOCK = 12,
    SHIM_CU_CLOCK_RATE = 13,
    SHIM_CU_MULTIPROCESSOR_COUNT = 16,
    SHIM_CU_PCI_BUS_ID = 33,
    SHIM_CU_PCI_DEVICE_ID = 34,
    SHIM_CU_L2_CACHE_SIZE = 38,
    SHIM_CU_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    SHIM_CU_PCI_DOMAIN_ID = 50,
    SHIM_CU_COMPUTE_CAPABILITY_MAJOR = 75,
    SHIM_CU_COMPUTE_CAPABILITY_MINOR = 76,
    SHIM_CU_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

// CUfunction_attribute values the shim reads and sets (cuda.h), and the dynamic shared memory a launch
// gets without opting into more.
enum {
    SHIM_CU_FUNC_SHARED_SIZE_BYTES = 1,
    SHIM_CU_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    SHIM_CU_DEFAULT_SHARED_BYTES = 48 << 10,
};

// CUresult values the shim translates (cuda.h).
enum {
    SHIM_CUDA_SUCCESS = 0,
    SHIM_CUDA_ERROR_INVALID_VALUE = 1,
    SHIM_CUDA_ERROR_OUT_OF_MEMORY = 2,
    SHIM_CUDA_ERROR_NOT_INITIALIZED = 3,
    SHIM_CUDA_ERROR_NO_DEVICE = 100,
    SHIM_CUDA_ERROR_INVALID_DEVICE = 101,
    SHIM_CUDA_ERROR_INVALID_IMAGE = 200,
    SHIM_CUDA_ERROR_INVALID_CONTEXT = 201,
    SHIM_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    SHIM_CUDA_ERROR_INVALID_HANDLE = 400,
    SHIM_CUDA_ERROR_NOT_FOUND = 500,
    SHIM_CUDA_ERROR_NOT_READY = 600,
    SHIM_CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    SHIM_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    SHIM_CUDA_ERROR_LAUNCH_TIMEOUT = 702,
    SHIM_CUDA_ERROR_LAUNCH_FAILED = 719,
    SHIM_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    SHIM_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    SHIM_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    SHIM_CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
};

// One X-macro list: the table's fields and the symbols loaded into them.
#define SHIM_CUDA_FUNCTIONS(F)                                                                   \
    F(cuInit, CUresult, (unsigned))                                                            \
    F(cuDriverGetVersion, CUresult, (int*))                                                    \
    F(cuDeviceGetCount, CUresult, (int*))                                                      \
    F(cuDeviceGet, CUresult, (CUdevice*, int))                                                 \
    F(cuDeviceGetName, CUresult, (char*, int, CUdevice))                                       \
    F(cuDeviceTotalMem_v2, CUresult, (size_t*, CUdevice))                                      \
    F(cuDeviceGetAttribute, CUresult, (int*, int, CUdevice))                                   \
    F(cuDevicePrimaryCtxRetain, CUresult, (CUcontext*, CUdevice))                              \
    F(cuCtxSetCurrent, CUresult, (CUcontext))                                                  \
    F(cuCtxGetCurrent, CUresult, (CUcontext*))                                                 \
    F(cuCtxGetDevice, CUresult, (CUdevice*))                                                   \
    F(cuMemAlloc_v2, CUresult, (CUdeviceptr*, size_t))                                         \
    F(cuMemFree_v2, CUresult, (CUdeviceptr))                                                   \
    F(cuMemHostAlloc, CUresult, (void**, size_t, unsigned int))                                \
    F(cuMemFreeHost, CUresult, (void*))                                                        \
    F(cuMemGetInfo_v2, CUresult, (size_t*, size_t*))                                           \
    F(cuMemcpyHtoDAsync_v2, CUresult, (CUdeviceptr, const void*, size_t, CUstream))           \
    F(cuMemcpyDtoHAsync_v2, CUresult, (void*, CUdeviceptr, size_t, CUstream))                 \
    F(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))           \
    F(cuMemsetD8Async, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream))              \
    F(cuStreamCreate, CUresult, (CUstream*, unsigned))                                         \
    F(cuStreamDestroy_v2, CUresult, (CUstream))                                                \
    F(cuStreamSynchronize, CUresult, (CUstream))                                               \
    F(cuEventCreate, CUresult, (CUevent*, unsigned))                                           \
    F(cuEventDestroy_v2, CUresult, (CUevent))                                                  \
    F(cuEventRecord, CUresult, (CUevent, CUstream))                                            \
    F(cuEventSynchronize, CUresult, (CUevent))                                                 \
    F(cuEventQuery, CUresult, (CUevent))                                                       \
    F(cuEventElapsedTime, CUresult, (float*, CUevent, CUevent))                                \
    F(cuModuleLoadData, CUresult, (CUmodule*, const void*))                                    \
    F(cuModuleUnload, CUresult, (CUmodule))                                                    \
    F(cuModuleGetFunction, CUresult, (CUfunction*, CUmodule, const char*))                     \
    F(cuFuncGetAttribute, CUresult, (int*, int, CUfunction))                                   \
    F(cuFuncSetAttribute, CUresult, (CUfunction, int, int))                                    \
    F(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUresult, (int*, CUfunction, int, size_t))  \
    F(cuLaunchKernel, CUresult, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, \
                                   unsigned, unsigned, CUstream, void**, void**))                \
    F(cuStreamBeginCapture_v2, CUresult, (CUstream, int))                                      \
    F(cuStreamEndCapture, CUresult, (CUstream, CUgraph*))                                      \
    F(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec*, CUgraph, unsigned long long))      \
    F(cuGraphLaunch, CUresult, (CUgraphExec, CUstream))                                        \
    F(cuGraphExecDestroy, CUresult, (CUgraphExec))                                             \
    F(cuGraphDestroy, CUresult, (CUgraph))                                                     \
    F(cuGetErrorName, CUresult, (CUresult, const char**))                                      \
    F(cuGetErrorString, CUresult, (CUresult, const char**))

#define SHIM_NVRTC_FUNCTIONS(F)                                                                  \
    F(nvrtcVersion, nvrtcResult, (int*, int*))                                                 \
    F(nvrtcCreateProgram, nvrtcResult, (nvrtcProgram*, const char*, const char*, int,          \
                                          const char* const*, const char* const*))               \
    F(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char* const*))               \
    F(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t*))                                 \
    F(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char*))                                       \
    F(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t*))                            \
    F(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char*))                                  \
    F(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram*))

#define SHIM_FIELD(name, ret, args) ret(*name) args;
struct shim_cuda {
    SHIM_CUDA_FUNCTIONS(SHIM_FIELD)
};
struct shim_nvrtc {
    SHIM_NVRTC_FUNCTIONS(SHIM_FIELD)
};
#undef SHIM_FIELD

// The first library of `names` that opens. A library or symbol that is missing stops the
// process with its name: the shim stands in for the HIP runtime, so nothing can go on.
static inline void* shim_open(const char* const* names) {
    for (const char* const* n = names; *n; ++n) {
        void* lib = dlopen(*n, RTLD_NOW | RTLD_GLOBAL);
        if (lib) return lib;
    }
    fprintf(stderr, "candle-rocm HIP shim: cannot load %s (%s)\n", names[0], dlerror());
    abort();
}

static inline void* shim_symbol(void* lib, const char* name) {
    void* f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "candle-rocm HIP shim: missing symbol %s\n", name);
        abort();
    }
    return f;
}

#define SHIM_LOAD(name, ret, args) t->name = (ret(*) args)shim_symbol(lib, #name);

static inline void shim_load_cuda(struct shim_cuda* t) {
    static const char* const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    void* lib = shim_open(names);
    SHIM_CUDA_FUNCTIONS(SHIM_LOAD)
}

static inline void shim_load_nvrtc(struct shim_nvrtc* t) {
    static const char* const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", NULL};
    void* lib = shim_open(names);
    SHIM_NVRTC_FUNCTIONS(SHIM_LOAD)
}

#undef SHIM_LOAD

#endif
