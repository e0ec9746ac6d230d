// librccl.so of the HIP shim: RCCL's API (rccl.h, built against the real header, so a
// signature that drifts from RCCL's stops the build) served by NVIDIA's NCCL, loaded at run time
// (libnccl.so.2 on the loader's path). RCCL keeps NCCL's API: the same names, enum values,
// unique-id bytes and opaque communicators, with hipStream_t where NCCL takes cudaStream_t. The
// shim's HIP streams are CUDA streams (hip_runtime_on_cuda.c), so every call passes through as
// it is. Its entry points are the calls rocm-ccl makes (the AMD tier compares the two lists).

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <rccl/rccl.h>

// Why NCCL could not be loaded, for ncclGetErrorString / ncclGetLastError.
static char load_error[512] = "";
static void* nccl = NULL;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_nccl(void) {
    nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (nccl == NULL) nccl = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (nccl == NULL) {
        const char* why = dlerror();
        snprintf(load_error, sizeof load_error,
                 "the RCCL shim could not load NVIDIA's NCCL (libnccl.so.2): %s", why ? why : "unknown");
    }
}

// The NCCL function `name`, or NULL (NCCL missing, or without it).
static void* nccl_symbol(const char* name) {
    pthread_once(&load_once, load_nccl);
    if (nccl == NULL) return NULL;
    void* f = dlsym(nccl, name);
    if (f == NULL) snprintf(load_error, sizeof load_error, "the RCCL shim found no %s in NCCL", name);
    return f;
}

// Calls NCCL's `name` (dlsym finds it in the loaded library each call, without shared state to
// guard); a missing NCCL or function is ncclSystemError.
// `params`: NCCL's parameter list, parenthesized.
#define FORWARD(name, params, ...)                                              \
    do {                                                                        \
        ncclResult_t(*f) params = (ncclResult_t(*) params)nccl_symbol(#name);   \
        if (f == NULL) return ncclSystemError;                                  \
        return f(__VA_ARGS__);                                                  \
    } while (0)

ncclResult_t ncclGetVersion(int* version) {
    FORWARD(ncclGetVersion, (int*), version);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    FORWARD(ncclGetUniqueId, (ncclUniqueId*), uniqueId);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    FORWARD(ncclCommInitRank, (ncclComm_t*, int, ncclUniqueId, int), comm, nranks, commId, rank);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    FORWARD(ncclCommDestroy, (ncclComm_t), comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    FORWARD(ncclCommAbort, (ncclComm_t), comm);
}

const char* ncclGetErrorString(ncclResult_t result) {
    const char* (*f)(ncclResult_t) = (const char* (*)(ncclResult_t))nccl_symbol("ncclGetErrorString");
    return f != NULL ? f(result) : load_error;
}

const char* ncclGetLastError(ncclComm_t comm) {
    const char* (*f)(ncclComm_t) = (const char* (*)(ncclComm_t))nccl_symbol("ncclGetLastError");
    return f != NULL ? f(comm) : load_error;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    FORWARD(ncclCommGetAsyncError, (ncclComm_t, ncclResult_t*), comm, asyncError);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    FORWARD(ncclCommCount, (const ncclComm_t, int*), comm, count);
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    FORWARD(ncclCommUserRank, (const ncclComm_t, int*), comm, rank);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, hipStream_t stream) {
    FORWARD(ncclReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, void*),
            sendbuff, recvbuff, count, datatype, op, root, comm, (void*)stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, hipStream_t stream) {
    FORWARD(ncclBroadcast, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, void*),
            sendbuff, recvbuff, count, datatype, root, comm, (void*)stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, hipStream_t stream) {
    FORWARD(ncclAllReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, void*), sendbuff,
            recvbuff, count, datatype, op, comm, (void*)stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, hipStream_t stream) {
    FORWARD(ncclReduceScatter, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, void*), sendbuff,
            recvbuff, recvcount, datatype, op, comm, (void*)stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, hipStream_t stream) {
    FORWARD(ncclAllGather, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, void*),
            sendbuff, recvbuff, sendcount, datatype, comm, (void*)stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      hipStream_t stream) {
    FORWARD(ncclSend, (const void*, size_t, ncclDataType_t, int, ncclComm_t, void*), sendbuff,
            count, datatype, peer, comm, (void*)stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      hipStream_t stream) {
    FORWARD(ncclRecv, (void*, size_t, ncclDataType_t, int, ncclComm_t, void*), recvbuff, count,
            datatype, peer, comm, (void*)stream);
}

ncclResult_t ncclGroupStart(void) {
    FORWARD(ncclGroupStart, (void));
}

ncclResult_t ncclGroupEnd(void) {
    FORWARD(ncclGroupEnd, (void));
}
