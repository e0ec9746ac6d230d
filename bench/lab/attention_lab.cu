// The decode step's split attention at an 8B llama's shape (32 query heads, 8 kv heads, head
// dim 128, f32 cache of 642 positions, query at position 576), launched back to back in one
// captured graph over 32 layers' caches (beyond L2), against a host reference. ATTENTION_SRC
// names the kernel source (default: the tree's), so that a copy with another ATTN_SPLIT_KEYS
// can be timed:
//   sed 's/define ATTN_SPLIT_KEYS .*/define ATTN_SPLIT_KEYS 128/' kernels/src/attention.hip > /tmp/a.hip
//   nvcc -O3 -arch=sm_90 -std=c++17 -w -DATTENTION_SRC='"/tmp/a.hip"' bench/lab/attention_lab.cu -o /tmp/att && /tmp/att
#define CANDLE_ROCM_NVIDIA 1
#include "../../kernels/include/compat.h"
#include "../../kernels/include/layout.h"
#include "../../kernels/include/map.h"
#ifndef ATTENTION_SRC
#define ATTENTION_SRC "../../kernels/src/attention.hip"
#endif
#include ATTENTION_SRC
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

int main() {
    const unsigned heads = 32, kv = 8, d = 128, cache = 642, layers = 32;
    const unsigned pos = 576;
    const float scale = 1.0f / sqrtf((float)d);
    const unsigned keys = ATTN_SPLIT_KEYS, groups = heads;
    const size_t smem = 0;
    char name[96];
    snprintf(name, sizeof name, "a block a query head and run of %u", keys);
    const unsigned splits = (cache + keys - 1) / keys;
    std::vector<float> hq(heads * d), hk((size_t)kv * cache * d), hv((size_t)kv * cache * d);
    srand(3);
    for (auto& x : hq) x = (float)rand() / RAND_MAX * 2 - 1;
    for (auto& x : hk) x = (float)rand() / RAND_MAX * 2 - 1;
    for (auto& x : hv) x = (float)rand() / RAND_MAX * 2 - 1;
    float *q, *out, *partial;
    u32 *positions, *tickets;
    std::vector<float*> ks(layers), vs(layers);
    const size_t cb = hk.size() * 4;
    for (unsigned l = 0; l < layers; ++l) {
        CK(cudaMalloc(&ks[l], cb)); CK(cudaMalloc(&vs[l], cb));
        CK(cudaMemcpy(ks[l], hk.data(), cb, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(vs[l], hv.data(), cb, cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&q, hq.size() * 4)); CK(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&out, heads * d * 4));
    CK(cudaMalloc(&partial, (size_t)heads * splits * (d + 2) * 4));
    CK(cudaMalloc(&positions, 4)); CK(cudaMemcpy(positions, &pos, 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&tickets, heads * 4)); CK(cudaMemset(tickets, 0, heads * 4));
    auto launch = [&](cudaStream_t s, unsigned l) {
        attention_split_f32<<<dim3(groups, splits), ATTN_SPLIT_THREADS, smem, s>>>(q, ks[l], vs[l], positions, partial, out, tickets,
                                                                            heads, kv, 1, d, cache, scale, ATTN_POSITIONS);
    };
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    launch(st, 0);
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    std::vector<float> got(heads * d);
    CK(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost));
    double maxdiff = 0;
    for (unsigned h = 0; h < heads; ++h) {
        const unsigned g = h / (heads / kv);
        std::vector<double> sc(pos + 1);
        double m = -1e300;
        for (unsigned j = 0; j <= pos; ++j) {
            double s = 0;
            for (unsigned e = 0; e < d; ++e) s += (double)hq[h * d + e] * scale * hk[((size_t)g * cache + j) * d + e];
            sc[j] = s; m = std::max(m, s);
        }
        double sum = 0;
        for (auto& s : sc) { s = exp(s - m); sum += s; }
        for (unsigned e = 0; e < d; ++e) {
            double o = 0;
            for (unsigned j = 0; j <= pos; ++j) o += sc[j] * hv[((size_t)g * cache + j) * d + e];
            maxdiff = std::max(maxdiff, fabs(o / sum - got[h * d + e]));
        }
    }
    const int reps = 10;
    cudaGraph_t gr; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < reps; ++r)
        for (unsigned l = 0; l < layers; ++l) launch(st, l);
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    cudaEventRecord(a, st);
    for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(ge, st));
    cudaEventRecord(b, st);
    CK(cudaEventSynchronize(b));
    float ms; cudaEventElapsedTime(&ms, a, b);
    const double us = ms * 1000.0 / (5 * reps * layers);
    const double kv_bytes = 2.0 * kv * (pos + 1) * d * 4;
    printf("| %s | %u x %u blocks | %.2f us | %.0f GB/s of the visible K/V | max |diff| vs host %.1e |\n", name, groups, splits, us,
           kv_bytes / (us * 1e3), maxdiff);
    return 0;
}
