// libhiprtc.so for the verification mode `--amd-shim`: exactly the hiprtc entry points the
// project calls, on top of NVRTC, built against the ROCm headers like the runtime shim.
//
// The program is the one the amd platform builds (its source and options); the options are
// carried over to NVRTC for the CUDA device underneath:
// - `--offload-arch=gfxN...` names the AMD target; gfx9 targets get 64-lane wavefronts
//   (-DCANDLE_ROCM_WAVE64_EMULATION), later ones 32. The CUDA device's sm_XY is compiled for.
// - -DCANDLE_ROCM_AMD becomes -DCANDLE_ROCM_NVIDIA: compat.h's AMD intrinsics have no NVRTC
//   counterpart, so the kernels' AMD-only lines stay checked by the real hiprtc (AMD tier).
// - -O3 is dropped (NVRTC optimizes by default); every other option is passed on, so one NVRTC
//   does not know fails the compile with NVRTC's message.
#include <hip/hip_version.h>
#include <hip/hiprtc.h>
#include <pthread.h>
#include <string.h>

#include "cuda_loader.h"

static struct shim_nvrtc rtc;
static struct shim_cuda cu;
static pthread_once_t rtc_once = PTHREAD_ONCE_INIT;

static void load_once(void) {
    shim_load_nvrtc(&rtc);
    shim_load_cuda(&cu);
}

static void ensure_loaded(void) { pthread_once(&rtc_once, load_once); }

static hiprtcResult translate(nvrtcResult r) {
    switch (r) {
    case 0: return HIPRTC_SUCCESS;
    case 1: return HIPRTC_ERROR_OUT_OF_MEMORY;
    case 2: return HIPRTC_ERROR_PROGRAM_CREATION_FAILURE;
    case 3: return HIPRTC_ERROR_INVALID_INPUT;
    case 4: return HIPRTC_ERROR_INVALID_PROGRAM;
    case 5: return HIPRTC_ERROR_INVALID_OPTION;
    case 6: return HIPRTC_ERROR_COMPILATION;
    case 7: return HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE;
    default: return HIPRTC_ERROR_INTERNAL_ERROR;
    }
}

hiprtcResult hiprtcVersion(int* major, int* minor) {
    if (!major || !minor) return HIPRTC_ERROR_INVALID_INPUT;
    // The version of the headers the shim was built against; NVRTC's own is below it.
    *major = HIP_VERSION_MAJOR;
    *minor = HIP_VERSION_MINOR;
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcCreateProgram(hiprtcProgram* prog, const char* src, const char* name, int num_headers,
                                 const char** headers, const char** include_names) {
    if (!prog || !src) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    nvrtcProgram p = NULL;
    hiprtcResult r = translate(rtc.nvrtcCreateProgram(&p, src, name, num_headers, headers, include_names));
    if (r == HIPRTC_SUCCESS) *prog = (hiprtcProgram)p;
    return r;
}

hiprtcResult hiprtcDestroyProgram(hiprtcProgram* prog) {
    if (!prog) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    nvrtcProgram p = (nvrtcProgram)*prog;
    hiprtcResult r = translate(rtc.nvrtcDestroyProgram(&p));
    *prog = NULL;
    return r;
}

// sm_XY of the calling thread's CUDA device (device 0 where no context is current).
static int device_sm(void) {
    CUdevice dev = 0;
    if (cu.cuInit(0) != SHIM_CUDA_SUCCESS) return 0;
    if (cu.cuCtxGetDevice(&dev) != SHIM_CUDA_SUCCESS && cu.cuDeviceGet(&dev, 0) != SHIM_CUDA_SUCCESS) return 0;
    int major = 0, minor = 0;
    cu.cuDeviceGetAttribute(&major, SHIM_CU_COMPUTE_CAPABILITY_MAJOR, dev);
    cu.cuDeviceGetAttribute(&minor, SHIM_CU_COMPUTE_CAPABILITY_MINOR, dev);
    return major * 10 + minor;
}

hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int num_options, const char** options) {
    if (!prog || num_options < 0 || (num_options > 0 && !options)) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    const int sm = device_sm();
    if (sm == 0) return HIPRTC_ERROR_INTERNAL_ERROR;
    const char** carried = calloc((size_t)num_options + 2, sizeof *carried);
    if (!carried) return HIPRTC_ERROR_OUT_OF_MEMORY;
    char arch_option[64];
    snprintf(arch_option, sizeof arch_option, "--gpu-architecture=sm_%d", sm);
    int n = 0, wave64 = 0, has_target = 0;
    for (int i = 0; i < num_options; ++i) {
        const char* o = options[i];
        const char* target = NULL;
        if (strncmp(o, "--offload-arch=", 15) == 0) target = o + 15;
        else if (strncmp(o, "-offload-arch=", 14) == 0) target = o + 14;
        if (target) {
            has_target = 1;
            wave64 = strncmp(target, "gfx9", 4) == 0;
            continue;
        }
        if (strcmp(o, "-O3") == 0) continue;
        carried[n++] = strcmp(o, "-DCANDLE_ROCM_AMD") == 0 ? "-DCANDLE_ROCM_NVIDIA" : o;
    }
    if (!has_target) {
        // hiprtc compiles for the current device without one; the project always names it.
        free(carried);
        return HIPRTC_ERROR_INVALID_OPTION;
    }
    carried[n++] = arch_option;
    if (wave64) carried[n++] = "-DCANDLE_ROCM_WAVE64_EMULATION";
    hiprtcResult r = translate(rtc.nvrtcCompileProgram((nvrtcProgram)prog, n, carried));
    free(carried);
    return r;
}

hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t* size) {
    if (!prog || !size) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    return translate(rtc.nvrtcGetProgramLogSize((nvrtcProgram)prog, size));
}

hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char* log) {
    if (!prog || !log) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    return translate(rtc.nvrtcGetProgramLog((nvrtcProgram)prog, log));
}

// The code object is the cubin of the CUDA device: what the runtime shim's hipModuleLoadData
// gives to cuModuleLoadData.
hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t* size) {
    if (!prog || !size) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    return translate(rtc.nvrtcGetCUBINSize((nvrtcProgram)prog, size));
}

hiprtcResult hiprtcGetCode(hiprtcProgram prog, char* code) {
    if (!prog || !code) return HIPRTC_ERROR_INVALID_INPUT;
    ensure_loaded();
    return translate(rtc.nvrtcGetCUBIN((nvrtcProgram)prog, code));
}
