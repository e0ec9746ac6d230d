// Batch-1 integer mat-vec variants and launch costs, timed on weights rotated beyond L2 (H100).
// Build and run on the GPU machine from the repository root:
//   nvcc -O3 -arch=sm_90 -std=c++17 -w bench/lab/matvec_lab.cu -o /tmp/lab && /tmp/lab [q4_0,q8_0,q4k,q6k [1 or 2: the variant set]] | launch
// It includes the kernels of kernels/src/quantized.hip as the nvidia platform compiles them
// (CANDLE_ROCM_NVIDIA), so "base" is the kernel the crate launches for one activation row.
#define CANDLE_ROCM_NVIDIA 1
#include "../../kernels/include/compat.h"
#include "../../kernels/include/layout.h"
#include "../../kernels/include/map.h"
#include "../../kernels/src/quantized.hip"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <cmath>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

// dot of a weight sub with x halves and record held in registers
template <typename Q>
__device__ __forceinline__ float dot_regs(const QSub& w, const QBytes16& lo, const QBytes16& hi, uint2 rec) {
    int i0 = 0, i1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        i0 = dot4_i8(w.q[i], (int)lo.w[i], i0);
        i1 = dot4_i8(w.q[4 + i], (int)hi.w[i], i1);
    }
    const float d = f32_from_bits(rec.x);
    const int s0 = (i16)(u16)(rec.y & 0xffffu), s1 = (i16)(u16)(rec.y >> 16);
    const float dots = d * (w.a[0] * (float)i0 + w.a[1] * (float)i1);
    if (Q::XSCHEME == Q8_SCHEME_1) return dots + w.b[0] * f16_round(f16_round((float)(s0 + s1)) * d);
    return dots + d * (w.b[0] * (float)s0 + w.b[1] * (float)s1);
}


// acc[r] += the dot of sub-block s of weight rows j0 + r (those below n) with x's sub-block.
template <typename Q, int R>
__device__ __forceinline__ void rows_dot(const u8* w, u64 total, u64 row_blocks, u64 j0, u64 n, u32 s, const QBytes16& xl,
                                         const QBytes16& xh, uint2 xr, float* acc) {
    const u32 blk = s / Q::SUBS;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (j0 + r < n) {
            QSub sw;
            Q::sub(q_block<Q>(w, total, (j0 + r) * row_blocks + blk), (int)(s - blk * Q::SUBS), sw);
            acc[r] += dot_regs<Q>(sw, xl, xh, xr);
        }
    }
}

// Each row's warp sum stored by lane 0.
template <int R>
__device__ __forceinline__ void store_rows(float* acc, float* y, u64 j0, u64 n, u32 lane) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && j0 + r < n) y[j0 + r] = v;
    }
}

// x's q8 form into shared memory: the sub-blocks' first halves, their second halves, their records.
__device__ __forceinline__ void stage_x(const u8* xq, u64 k, QBytes16* lo, QBytes16* hi, uint2* rec) {
    for (u32 s = threadIdx.x; s < (u32)(k / 32); s += blockDim.x) {
        const QBytes16* src = (const QBytes16*)(xq + (u64)s * 32);
        lo[s] = src[0];
        hi[s] = src[1];
        rec[s] = ((const uint2*)(xq + k))[s];
    }
    __syncthreads();
}

template <typename Q>
__global__ void mv_base(const u8* w, u64 total, const u8* xq, float* y, u64 n, u64 k) {
    matvec_q8<Q, 1>(w, total, xq, y, n, k, 1u, 1u);
}

template <typename Q>
__global__ void quant_x(const float* x, u8* out, u64 k) { quantize_q8(x, out, 1, k, Q::XSCHEME); }

// x staged in shared memory ([lo halves][hi halves][records]); R weight rows a warp; U unroll.
template <typename Q, int R, int U>
__global__ void mv_smem(const u8* w, u64 total, const u8* xq, float* y, u64 n, u64 k) {
    extern __shared__ QBytes16 sh[];
    const u32 subs = (u32)(k / 32);
    QBytes16 *lo = sh, *hi = sh + subs;
    uint2* rec = (uint2*)(sh + 2 * subs);
    stage_x(xq, k, lo, hi, rec);
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const u64 row_blocks = k / Q::BLOCK;
    for (u64 j0 = ((u64)blockIdx.x * warps + warp) * R; j0 < n; j0 += (u64)gridDim.x * warps * R) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll U
        for (u32 s = lane; s < subs; s += 32) {
            rows_dot<Q, R>(w, total, row_blocks, j0, n, s, lo[s], hi[s], rec[s], acc);
        }
        store_rows<R>(acc, y, j0, n, lane);
    }
}

// x from global (L1), R rows a warp, U unroll (the base kernel with R rows).
template <typename Q, int R, int U>
__global__ void mv_glob(const u8* w, u64 total, const u8* xq, float* y, u64 n, u64 k) {
    const u32 subs = (u32)(k / 32);
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const u64 row_blocks = k / Q::BLOCK;
    const u8* meta = xq + k;
    for (u64 j0 = ((u64)blockIdx.x * warps + warp) * R; j0 < n; j0 += (u64)gridDim.x * warps * R) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll U
        for (u32 s = lane; s < subs; s += 32) {
            const QBytes16* src = (const QBytes16*)(xq + (u64)s * 32);
            rows_dot<Q, R>(w, total, row_blocks, j0, n, s, src[0], src[1], ((const uint2*)meta)[s], acc);
        }
        store_rows<R>(acc, y, j0, n, lane);
    }
}

// Half a warp a row: x staged in smem, lanes 0-15 on row j, 16-31 on row j+1 (more rows in
// flight a warp for short k).
template <typename Q, int U>
__global__ void mv_half(const u8* w, u64 total, const u8* xq, float* y, u64 n, u64 k) {
    extern __shared__ QBytes16 sh[];
    const u32 subs = (u32)(k / 32);
    QBytes16 *lo = sh, *hi = sh + subs;
    uint2* rec = (uint2*)(sh + 2 * subs);
    stage_x(xq, k, lo, hi, rec);
    const u32 lane = threadIdx.x % 16, half = (threadIdx.x / 16) % 2, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const u64 row_blocks = k / Q::BLOCK;
    for (u64 j0 = ((u64)blockIdx.x * warps + warp) * 2; j0 < n; j0 += (u64)gridDim.x * warps * 2) {
        const u64 j = j0 + half;
        float acc = 0.0f;
        if (j < n) {
#pragma unroll U
            for (u32 s = lane; s < subs; s += 16) {
                const u32 blk = s / Q::SUBS;
                QSub sw;
                Q::sub(q_block<Q>(w, total, j * row_blocks + blk), (int)(s - blk * Q::SUBS), sw);
                acc += dot_regs<Q>(sw, lo[s], hi[s], rec[s]);
            }
        }
        for (int o = 8; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0 && j < n) y[j] = acc;
    }
}


template <typename Q, int WPR>
__global__ void mv_base_wpr(const u8* w, u64 total, const u8* xq, float* y, u64 n, u64 k) {
    matvec_q8<Q, 1>(w, total, xq, y, n, k, 1u, (u32)WPR);
}

// TPR threads on each of R weight rows at once: a thread loads its x sub-block once and the R
// rows' weights at that position (R independent loads in flight, the chain of a thread is
// subs / TPR long); rows' sums meet through shuffles and shared memory.
template <typename Q, int TPR, int R>
__global__ void mv_tile(const u8* w, u64 total, const u8* xq, float* y, u64 n, u64 k) {
    __shared__ float part[32][R];
    const u32 subs = (u32)(k / 32);
    const u32 g = threadIdx.x / TPR, t = threadIdx.x % TPR, groups = blockDim.x / TPR;
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const u64 row_blocks = k / Q::BLOCK;
    const u8* meta = xq + k;
    const u64 j0 = ((u64)blockIdx.x * groups + g) * R;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    for (u32 s = t; s < subs; s += TPR) {
        const QBytes16* src = (const QBytes16*)(xq + (u64)s * 32);
        rows_dot<Q, R>(w, total, row_blocks, j0, n, s, src[0], src[1], ((const uint2*)meta)[s], acc);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[r] = v;
    }
    if (TPR == 32) {
        if (lane == 0)
            for (int r = 0; r < R; ++r) if (j0 + r < n) y[j0 + r] = acc[r];
        return;
    }
    if (lane == 0)
        for (int r = 0; r < R; ++r) part[warp][r] = acc[r];
    __syncthreads();
    if (t < R && j0 + t < n) {
        float v = 0.0f;
        for (u32 p = 0; p < TPR / 32; ++p) v += part[g * (TPR / 32) + p][t];
        y[j0 + t] = v;
    }
}

struct Shape { u64 n, k; };
typedef void (*Kern)(const u8*, u64, const u8*, float*, u64, u64);

static int sms;
static float ceiling_gbs;

struct Variant { std::string name; Kern f; int rows_per_warp; bool smem; int block; bool persistent; };

template <typename Q>
void run_type(const char* tname, const std::vector<Shape>& shapes, const std::vector<Variant>& vs) {
    for (auto sh : shapes) {
        const u64 blocks = sh.n * sh.k / Q::BLOCK;
        const u64 bytes = blocks * Q::BYTES;
        const int copies = (int)std::max<u64>(2, (400ull << 20) / bytes + 1);
        std::vector<u8*> ws(copies);
        std::vector<u8> host(bytes);
        srand(7);
        const u64 qbytes = blocks * Q::QBYTES;
        for (u64 i = 0; i < qbytes; ++i) host[i] = (u8)rand();
        for (u64 i = qbytes; i < bytes; ++i) host[i] = (i % 2) ? 0x2c : (u8)(rand() & 0x3f);
        for (auto& p : ws) { CK(cudaMalloc(&p, bytes)); CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice)); }
        float* x; u8* xq; float* y; float* y0;
        CK(cudaMalloc(&x, sh.k * 4)); CK(cudaMalloc(&xq, sh.k * 2)); CK(cudaMalloc(&y, sh.n * 4)); CK(cudaMalloc(&y0, sh.n * 4));
        std::vector<float> hx(sh.k);
        for (auto& v : hx) v = (float)rand() / RAND_MAX * 2.0f - 1.0f;
        CK(cudaMemcpy(x, hx.data(), sh.k * 4, cudaMemcpyHostToDevice));
        quant_x<Q><<<(unsigned)((sh.k / 32 + 255) / 256), 256>>>(x, xq, sh.k);
        CK(cudaGetLastError());
        std::vector<float> ref(sh.n), got(sh.n);
        for (size_t vi = 0; vi < vs.size(); ++vi) {
            const Variant& v = vs[vi];
            const int warps = v.block / 32;
            u64 rows_per_block = (u64)warps * v.rows_per_warp;
            if (v.rows_per_warp == 0) rows_per_block = warps / (v.name.find("2 warps") != std::string::npos ? 2 : 4);
            if (v.rows_per_warp < 0) {
                const int tpr = atoi(v.name.c_str() + v.name.find('T') + 1);
                rows_per_block = (u64)(v.block / tpr) * (u64)(-v.rows_per_warp);
            }
            size_t smem = v.smem ? (sh.k / 32) * 40 : 0;
            if (smem > 48 * 1024) CK(cudaFuncSetAttribute(v.f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            int occ = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.f, v.block, smem));
            u64 grid = (sh.n + rows_per_block - 1) / rows_per_block;
            if (v.persistent) grid = std::min<u64>(grid, (u64)occ * sms);
            cudaFuncAttributes attr;
            CK(cudaFuncGetAttributes(&attr, v.f));
            CK(cudaMemset(y, 0, sh.n * 4));
            v.f<<<(unsigned)grid, v.block, smem>>>(ws[0], blocks, xq, y, sh.n, sh.k);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), y, sh.n * 4, cudaMemcpyDeviceToHost));
            if (vi == 0) ref = got;
            double maxd = 0, maxr = 0;
            for (u64 i = 0; i < sh.n; ++i) { maxd = std::max(maxd, (double)fabsf(got[i] - ref[i])); maxr = std::max(maxr, (double)fabsf(ref[i])); }
            const int iters = 200;
            cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
            for (int i = 0; i < 10; ++i) v.f<<<(unsigned)grid, v.block, smem>>>(ws[i % copies], blocks, xq, y, sh.n, sh.k);
            cudaEventRecord(a);
            for (int i = 0; i < iters; ++i) v.f<<<(unsigned)grid, v.block, smem>>>(ws[i % copies], blocks, xq, y, sh.n, sh.k);
            cudaEventRecord(b);
            CK(cudaEventSynchronize(b));
            float ms; cudaEventElapsedTime(&ms, a, b);
            const double us = ms * 1000.0 / iters;
            const double gbs = (double)bytes / (us * 1e3);
            printf("| %s | %llux%llu | %s | %d | %llu | %d | %d | %.2f | %.0f | %.1f%% | %.1e |\n", tname, (unsigned long long)sh.n,
                   (unsigned long long)sh.k, v.name.c_str(), v.block, (unsigned long long)grid, occ, attr.numRegs, us, gbs,
                   100.0 * gbs / ceiling_gbs, maxr > 0 ? maxd / maxr : maxd);
            fflush(stdout);
        }
        for (auto p : ws) cudaFree(p);
        cudaFree(x); cudaFree(xq); cudaFree(y); cudaFree(y0);
    }
}

// Set 1: x from global or shared memory, R rows a warp, half a warp a row. Set 2: several warps
// a row, and tiles of TPR threads on R rows.
template <typename Q>
std::vector<Variant> variants(int set) {
    std::vector<Variant> v;
    v.push_back({"base (1 warp a row)", mv_base<Q>, 1, false, 256, false});
    if (set == 1) {
        v.push_back({"glob R1 U4", mv_glob<Q, 1, 4>, 1, false, 256, false});
        v.push_back({"glob R2 U2", mv_glob<Q, 2, 2>, 2, false, 256, false});
        v.push_back({"glob R4 U1", mv_glob<Q, 4, 1>, 4, false, 256, false});
        v.push_back({"smem R1 U4", mv_smem<Q, 1, 4>, 1, true, 256, false});
        v.push_back({"smem R1 U4 b512", mv_smem<Q, 1, 4>, 1, true, 512, false});
        v.push_back({"smem R1 U4 persistent", mv_smem<Q, 1, 4>, 1, true, 256, true});
        v.push_back({"smem R2 U2", mv_smem<Q, 2, 2>, 2, true, 256, false});
        v.push_back({"smem R2 U4", mv_smem<Q, 2, 4>, 2, true, 256, false});
        v.push_back({"smem R4 U1", mv_smem<Q, 4, 1>, 4, true, 256, false});
        v.push_back({"smem R4 U2", mv_smem<Q, 4, 2>, 4, true, 256, false});
        v.push_back({"smem R2 U2 persistent", mv_smem<Q, 2, 2>, 2, true, 256, true});
        v.push_back({"half U4", mv_half<Q, 4>, 2, true, 256, false});
        v.push_back({"half U8", mv_half<Q, 8>, 2, true, 256, false});
        return v;
    }
    v.push_back({"base 2 warps a row", mv_base_wpr<Q, 2>, 0, false, 256, false});
    v.push_back({"base 4 warps a row", mv_base_wpr<Q, 4>, 0, false, 256, false});
    v.push_back({"smem R1 U4", mv_smem<Q, 1, 4>, 1, true, 256, false});
    v.push_back({"tile T32 R2", mv_tile<Q, 32, 2>, -2, false, 256, false});
    v.push_back({"tile T32 R4", mv_tile<Q, 32, 4>, -4, false, 256, false});
    v.push_back({"tile T64 R2", mv_tile<Q, 64, 2>, -2, false, 256, false});
    v.push_back({"tile T64 R4", mv_tile<Q, 64, 4>, -4, false, 256, false});
    v.push_back({"tile T128 R2", mv_tile<Q, 128, 2>, -2, false, 256, false});
    v.push_back({"tile T128 R4", mv_tile<Q, 128, 4>, -4, false, 256, false});
    v.push_back({"tile T128 R8", mv_tile<Q, 128, 8>, -8, false, 256, false});
    v.push_back({"tile T256 R4", mv_tile<Q, 256, 4>, -4, false, 256, false});
    v.push_back({"tile T64 R4 b128", mv_tile<Q, 64, 4>, -4, false, 128, false});
    v.push_back({"tile T128 R4 b128", mv_tile<Q, 128, 4>, -4, false, 128, false});
    return v;
}

__global__ void copy_kernel(const uint4* a, uint4* b, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) b[i] = a[i];
}


__global__ void empty_kernel() {}

// A streaming read of `words` 16-byte words: the fastest a kernel of this size can read.
__global__ void read_kernel(const uint4* a, u64 words, float* out) {
    u32 acc = 0;
#pragma unroll 4
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        const uint4 v = a[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) out[0] = 1.0f;
}

// Launch `f` `count` times on rotating buffers, in a stream and as one captured graph; us each.
template <typename F>
void stream_and_graph(const char* name, F launch, int count) {
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 10; ++i) launch(st, i);
    cudaEventRecord(a, st);
    for (int i = 0; i < count; ++i) launch(st, i);
    cudaEventRecord(b, st);
    CK(cudaEventSynchronize(b));
    float ms_s; cudaEventElapsedTime(&ms_s, a, b);
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < count; ++i) launch(st, i);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEventRecord(a, st);
    for (int rep = 0; rep < 5; ++rep) CK(cudaGraphLaunch(ge, st));
    cudaEventRecord(b, st);
    CK(cudaEventSynchronize(b));
    float ms_g; cudaEventElapsedTime(&ms_g, a, b);
    printf("| %s | %.2f | %.2f |\n", name, ms_s * 1000.0 / count, ms_g * 1000.0 / (5 * count));
    fflush(stdout);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g); cudaStreamDestroy(st);
}

void launch_costs() {
    printf("\n| launches of | us each, stream | us each, graph |\n|---|---:|---:|\n");
    stream_and_graph("empty kernel, 1 block", [](cudaStream_t s, int) { empty_kernel<<<1, 32, 0, s>>>(); }, 200);
    stream_and_graph("empty kernel, 1056 blocks", [](cudaStream_t s, int) { empty_kernel<<<1056, 256, 0, s>>>(); }, 200);
    const u64 big = 400ull << 20;
    uint4* buf; float* out; CK(cudaMalloc(&buf, big)); CK(cudaMalloc(&out, 4)); CK(cudaMemset(buf, 1, big));
    for (double mb : {9.4, 14.2, 33.0, 66.1}) {
        const u64 words = (u64)(mb * 1e6) / 16;
        const int copies = (int)(big / 16 / words);
        for (int bpsm : {4, 8}) {
            char name[96];
            snprintf(name, sizeof name, "streaming read %.1f MB, %d blocks of 256 a SM", mb, bpsm);
            const u64 blocks = (u64)sms * bpsm;
            stream_and_graph(name, [&](cudaStream_t s, int i) { read_kernel<<<(unsigned)blocks, 256, 0, s>>>(buf + (i % copies) * words, words, out); }, 100);
        }
        // as the percentage of the copy ceiling, from the graph time: printed by the reader
    }
    cudaFree(buf); cudaFree(out);
}

template <typename Q>
void matvec_graph(const char* tname, u64 n, u64 k) {
    const u64 blocks = n * k / Q::BLOCK, bytes = blocks * Q::BYTES;
    const int copies = (int)std::max<u64>(2, (400ull << 20) / bytes + 1);
    u8* ws; CK(cudaMalloc(&ws, bytes * copies)); CK(cudaMemset(ws, 0x2c, bytes * copies));
    u8* xq; float* y; CK(cudaMalloc(&xq, k * 2)); CK(cudaMemset(xq, 0, k * 2)); CK(cudaMalloc(&y, n * 4));
    char name[96];
    snprintf(name, sizeof name, "base mat-vec %s %llux%llu (%.1f MB)", tname, (unsigned long long)n, (unsigned long long)k, bytes / 1e6);
    const unsigned grid = (unsigned)((n + 7) / 8);
    stream_and_graph(name, [&](cudaStream_t s, int i) { mv_base<Q><<<grid, 256, 0, s>>>(ws + (i % copies) * bytes, blocks, xq, y, n, k); }, 100);
    cudaFree(ws); cudaFree(xq); cudaFree(y);
}

int main(int argc, char** argv) {
    cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0)); sms = p.multiProcessorCount;
    const u64 cb = 1ull << 30;
    void *a, *b; CK(cudaMalloc(&a, cb)); CK(cudaMalloc(&b, cb));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice));
    cudaEventRecord(e0);
    for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice));
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    ceiling_gbs = (float)(2.0 * cb * 10 / (ms * 1e6));
    cudaFree(a); cudaFree(b);
    printf("device %s, %d SMs, copy ceiling %.1f GB/s (memcpy D2D, read+write)\n\n", p.name, sms, ceiling_gbs);
    printf("| type | rows x k | variant | block | grid | blocks/SM | regs | us | GB/s | %% ceiling | max rel diff vs base |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    std::vector<Shape> shapes = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
    std::string only = argc > 1 ? argv[1] : "q4_0,q8_0,q4k,q6k";
    const int set = argc > 2 ? atoi(argv[2]) : 2;
    if (only.find("launch") != std::string::npos) {
        launch_costs();
        matvec_graph<Q4_0>("q4_0", 4096, 4096);
        matvec_graph<Q4_0>("q4_0", 6144, 4096);
        matvec_graph<Q4_0>("q4_0", 4096, 14336);
        matvec_graph<Q4_0>("q4_0", 28672, 4096);
        return 0;
    }
    if (only.find("q4_0") != std::string::npos) run_type<Q4_0>("q4_0", shapes, variants<Q4_0>(set));
    if (only.find("q8_0") != std::string::npos) run_type<Q8_0>("q8_0", shapes, variants<Q8_0>(set));
    if (only.find("q4k") != std::string::npos) run_type<Q4K>("q4k", shapes, variants<Q4K>(set));
    if (only.find("q6k") != std::string::npos) run_type<Q6K>("q6k", shapes, variants<Q6K>(set));
    return 0;
}
