// attention.hip: softmax(q k^T * scale) v for queries over a key/value cache, in one launch:
// what a decode step needs instead of a gemm, a mask, a softmax and a second gemm.
//
// q is [rows = batch x heads x queries, head_dim]; k and v are [batch, kv_heads, cache_len,
// head_dim] (query head h reads kv head h / (heads / kv_heads), grouped-query attention); all
// contiguous. Query i sees cache positions 0..=last(i), where last(i) is
// - ATTN_ALL:       cache_len - 1 (no mask);
// - ATTN_CAUSAL:    cache_len - queries + i (the queries are the cache's last positions);
// - ATTN_POSITIONS: positions[b * positions_stride + i] for query i of batch b, read on the
//                   device (a static cache filled up to a position the host does not know, as a
//                   captured decode step needs; sequences of a batch each at their own), clamped
//                   to the cache.
// One block of ATTN_BLOCK threads a row. Keys go in chunks of one per thread: each thread
// scores its key (the dot product in the accumulator type, q pre-scaled in shared memory, the
// key read in 16-byte packs), the block takes the chunk's max, the running sum and output are
// rescaled to it (online softmax, so any cache length works), and the chunk's weights meet v:
// thread (group g, pack p) adds the chunk's keys g, g + groups, ... at the pack's dims. The
// groups' partial outputs are summed at the end in a fixed order. Every reduction combines in
// a fixed order: results do not depend on timing. The loops over packs and keys are unrolled
// so that a thread has several loads in flight (a decode step's attention is latency-bound).

#define ATTN_BLOCK 512
#define ATTN_MAX_HEAD_DIM 256
#define ATTN_ALL 0u
#define ATTN_CAUSAL 1u
#define ATTN_POSITIONS 2u

// The last cache position query i sees under `mode` (`positions`: its sequence's).
DEVICE u32 attn_last(const u32* positions, u32 i, u32 queries, u32 cache_len, u32 mode) {
    u32 last = cache_len - 1;
    if (mode == ATTN_CAUSAL) last = cache_len - queries + i;
    else if (mode == ATTN_POSITIONS && positions[i] < last) last = positions[i];
    return last;
}

// T: the queries' and the output's dtype; C: the cache's (T, or a 16-bit float type under f32
// queries: a cache of half the bytes). N: cache elements a thread reads at once from a row (a
// 16-byte pack, or 1 where rows are not whole aligned packs).
template <typename T, typename C, int N>
DEVICE void cached_attention_impl(const T* q, const C* k, const C* v, const u32* positions, T* out,
                                  u32 heads, u32 kv_heads, u32 queries, u32 head_dim,
                                  u32 cache_len, float scale, u32 mode, u32 positions_stride) {
    typedef typename Acc<T>::type A;
    typedef typename RawOf<sizeof(C) * N>::type Raw;
    __shared__ A qs[ATTN_MAX_HEAD_DIM];
    __shared__ A weights[ATTN_BLOCK];
    __shared__ A partial[ATTN_BLOCK * N];
    const u32 tid = threadIdx.x, nthreads = blockDim.x;
    const u64 row = blockIdx.x;
    const u32 i = (u32)(row % queries);
    const u64 batch_head = row / queries;
    const u32 h = (u32)(batch_head % heads);
    const u64 b = batch_head / heads;
    const u32 kv_head = h / (heads / kv_heads);
    const u64 cache_start = (b * kv_heads + kv_head) * (u64)cache_len * head_dim;
    const C* kc = k + cache_start;
    const C* vc = v + cache_start;
    const u32 len = attn_last(positions + b * positions_stride, i, queries, cache_len, mode) + 1;

    for (u32 d = tid; d < head_dim; d += nthreads) qs[d] = cvt<A>(q[row * head_dim + d]) * (A)scale;
    __syncthreads();
    const u32 packs = head_dim / N;          // packs a row
    const u32 groups = nthreads / packs;     // the host keeps head_dim <= the block
    const u32 g = tid / packs, p = tid % packs;
    const A neg_inf = m_neg_inf((A)0);
    A m = neg_inf, s = (A)0;
    A acc[N];
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] = (A)0;
    for (u32 base = 0; base < len; base += nthreads) {
        // scores: a key a thread, its row read a pack at a time (independent loads in flight)
        const u32 j = base + tid;
        A score = neg_inf;
        if (j < len) {
            const Raw* kr = reinterpret_cast<const Raw*>(kc + (u64)j * head_dim);
            A dot = (A)0;
#pragma unroll 8
            for (u32 pp = 0; pp < packs; ++pp) {
                Pack<C, N> kp;
                kp.raw = kr[pp];
#pragma unroll
                for (int e = 0; e < N; ++e) dot += qs[pp * N + e] * cvt<A>(kp.v[e]);
            }
            score = dot;
        }
        const A chunk_max = block_combine_all<MaxOf<A> >(score);
        const A m_new = chunk_max > m ? chunk_max : m;
        const A w = j < len ? m_exp(score - m_new) : (A)0;
        // m is -inf only before the first chunk, where s and acc are still 0
        const A rescale = m == neg_inf ? (A)0 : m_exp(m - m_new);
        weights[tid] = w;
        const A chunk_sum = block_combine_all<SumOf<A> >(w);  // its barrier publishes weights
        s = s * rescale + chunk_sum;
        m = m_new;
        // weights x v: thread (group g, pack p) takes the chunk's keys g, g + groups, ...
#pragma unroll
        for (int e = 0; e < N; ++e) acc[e] *= rescale;
        if (g < groups) {
            const u32 n = len - base < nthreads ? len - base : nthreads;
#pragma unroll 8
            for (u32 jj = g; jj < n; jj += groups) {
                Pack<C, N> vp;
                vp.raw = reinterpret_cast<const Raw*>(vc + (u64)(base + jj) * head_dim)[p];
                const A wj = weights[jj];
#pragma unroll
                for (int e = 0; e < N; ++e) acc[e] += wj * cvt<A>(vp.v[e]);
            }
        }
        __syncthreads();  // weights are rewritten by the next chunk
    }
    if (g < groups) {
#pragma unroll
        for (int e = 0; e < N; ++e) partial[g * head_dim + p * N + e] = acc[e];
    }
    __syncthreads();
    if (tid < head_dim) {
        A total = (A)0;
        for (u32 gg = 0; gg < groups; ++gg) total += partial[gg * head_dim + tid];
        out[row * head_dim + tid] = cvt<T>(total / s);
    }
}

// 16-byte packs where every cache row is whole aligned packs, else an element at a time.
template <typename T, typename C>
DEVICE void cached_attention_any(const T* q, const C* k, const C* v, const u32* positions, T* out,
                                 u32 heads, u32 kv_heads, u32 queries, u32 head_dim, u32 cache_len,
                                 float scale, u32 mode, u32 positions_stride) {
    constexpr int N = 16 / sizeof(C);
    if (head_dim % N == 0 && (usize)k % 16 == 0 && (usize)v % 16 == 0)
        cached_attention_impl<T, C, N>(q, k, v, positions, out, heads, kv_heads, queries, head_dim,
                                    cache_len, scale, mode, positions_stride);
    else
        cached_attention_impl<T, C, 1>(q, k, v, positions, out, heads, kv_heads, queries, head_dim,
                                    cache_len, scale, mode, positions_stride);
}

// Split over the cache (flash-decoding), for few query rows over a long cache: one block of
// whole warps, up to ATTN_SPLIT_THREADS threads, per (row, run of ATTN_SPLIT_KEYS cache
// positions) writes the run's
// max score, its sum of exp(score - max) and its weighted sum of v rows to `partial` ((rows,
// splits, head_dim + 2) in the accumulator type); the last of a row's blocks to finish (by a
// ticket, see attn_combine_runs) rescales the runs to their common max and sums them in order
// into the row's output: one launch. Runs past a row's last visible position write an empty
// run (max -inf, sums 0). A decode step's attention waits on memory, not arithmetic, so both
// phases keep ATTN_SPLIT_UNROLL loads in flight a thread:
// - scores: a key row is read by a group of lanes (a pack each, the fewest power of two of
//   lanes that covers the row, at most a warp), each lane loading its pack of
//   ATTN_SPLIT_UNROLL keys before it multiplies; the group's sum by shuffles;
// - weights x v: thread (group g, pack p) adds keys g, g + groups, ... at the pack's dims,
//   ATTN_SPLIT_UNROLL rows loaded at once; the groups' sums are added in order at the end.
// The host gives a block the threads that score a run in one round of loads (ATTN_SPLIT_KEYS /
// ATTN_SPLIT_UNROLL key groups of lanes), at most ATTN_SPLIT_THREADS: at the 8B llama's decode
// shape (f32 rows of 32 packs) 256 threads, 12.6 us a launch against 14.4 with 128; f16 rows
// (16 packs) 128 (bench/results/2026-11-26-h100-split-attention-lab.md, -split-256.md).
#define ATTN_SPLIT_THREADS 256
#define ATTN_SPLIT_KEYS 64
#define ATTN_SPLIT_UNROLL 8

template <typename T, typename C, int N>
DEVICE void attention_split_impl(const T* q, const C* k, const C* v, const u32* positions,
                                 typename Acc<T>::type* partial, u32 heads, u32 kv_heads, u32 queries,
                                 u32 head_dim, u32 cache_len, float scale, u32 mode,
                                 u32 positions_stride) {
    typedef typename Acc<T>::type A;
    typedef typename RawOf<sizeof(C) * N>::type Raw;
    constexpr int U = ATTN_SPLIT_UNROLL;
    __shared__ A qs[ATTN_MAX_HEAD_DIM];
    __shared__ A weights[ATTN_SPLIT_KEYS];
    // the v groups' sums: groups x head_dim <= max(ATTN_SPLIT_THREADS x N, ATTN_MAX_HEAD_DIM)
    __shared__ A part[ATTN_SPLIT_THREADS * 8];
    const u32 tid = threadIdx.x, lane = tid % warpSize, warp = tid / warpSize;
    const u32 warps = blockDim.x / warpSize;
    const u64 row = blockIdx.x;
    const u32 split = blockIdx.y, splits = gridDim.y;
    const u32 i = (u32)(row % queries);
    const u64 batch_head = row / queries;
    const u32 h = (u32)(batch_head % heads);
    const u64 b = batch_head / heads;
    const u32 kv_head = h / (heads / kv_heads);
    const u64 cache_start = (b * kv_heads + kv_head) * (u64)cache_len * head_dim;
    const u32 len = attn_last(positions + b * positions_stride, i, queries, cache_len, mode) + 1;
    const u32 first = split * ATTN_SPLIT_KEYS;
    const u32 n = first >= len ? 0 : (len - first < ATTN_SPLIT_KEYS ? len - first : ATTN_SPLIT_KEYS);
    A* out = partial + (row * splits + split) * (u64)(head_dim + 2);
    const A neg_inf = m_neg_inf((A)0);
    if (n == 0) {
        for (u32 d = tid; d < head_dim + 2; d += blockDim.x) out[d] = d == 0 ? neg_inf : (A)0;
        return;
    }
    const Raw* kr = reinterpret_cast<const Raw*>(k + cache_start + (u64)first * head_dim);
    const Raw* vr = reinterpret_cast<const Raw*>(v + cache_start + (u64)first * head_dim);
    for (u32 d = tid; d < head_dim; d += blockDim.x) qs[d] = cvt<A>(q[row * head_dim + d]) * (A)scale;
    __syncthreads();
    const u32 packs = head_dim / N;
    u32 lanes_per_key = 1;
    while (lanes_per_key < packs && lanes_per_key < warpSize) lanes_per_key *= 2;
    const u32 kl = lane % lanes_per_key;
    const u32 stride = warps * (warpSize / lanes_per_key);  // keys the block scores at once
    const u32 mine = warp * (warpSize / lanes_per_key) + lane / lanes_per_key;
    // every lane runs the same iterations: the shuffles need the whole warp
    for (u32 r0 = 0; r0 * stride < n; r0 += U) {
        A dot[U];
#pragma unroll
        for (int u = 0; u < U; ++u) dot[u] = (A)0;
        for (u32 pp = kl; pp < packs; pp += lanes_per_key) {
            Pack<C, N> kp[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const u32 j = mine + (r0 + u) * stride;
                if (j < n) kp[u].raw = kr[(u64)j * packs + pp];
                else kp[u].raw = Raw{};
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
#pragma unroll
                for (int e = 0; e < N; ++e) dot[u] += qs[pp * N + e] * cvt<A>(kp[u].v[e]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            dot[u] = warp_combine<SumOf<A> >(dot[u], lanes_per_key);
            const u32 j = mine + (r0 + u) * stride;
            if (kl == 0 && j < n) weights[j] = dot[u];  // the score, until the weights replace it
        }
    }
    __syncthreads();
    // the run's max and sum, each warp alike (lanes, then shuffles: a fixed order)
    A m = neg_inf;
    for (u32 j = lane; j < n; j += warpSize) m = weights[j] > m ? weights[j] : m;
    m = warp_max(m);
    A sum = (A)0;
    for (u32 j = lane; j < n; j += warpSize) sum += m_exp(weights[j] - m);
    sum = warp_sum(sum);
    __syncthreads();  // every warp has read the scores
    for (u32 j = tid; j < n; j += blockDim.x) weights[j] = m_exp(weights[j] - m);
    __syncthreads();
    // weights x v
    const bool few_packs = packs <= blockDim.x;
    const u32 groups = few_packs ? blockDim.x / packs : 1;
    const u32 g = few_packs ? tid / packs : 0;
    if (g < groups) {
        for (u32 p = few_packs ? tid % packs : tid; p < packs; p += blockDim.x) {
            A acc[N];
#pragma unroll
            for (int e = 0; e < N; ++e) acc[e] = (A)0;
            for (u32 j0 = g; j0 < n; j0 += groups * U) {
                Pack<C, N> vp[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const u32 j = j0 + u * groups;
                    if (j < n) vp[u].raw = vr[(u64)j * packs + p];
                    else vp[u].raw = Raw{};
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const u32 j = j0 + u * groups;
                    const A w = j < n ? weights[j] : (A)0;
#pragma unroll
                    for (int e = 0; e < N; ++e) acc[e] += w * cvt<A>(vp[u].v[e]);
                }
            }
#pragma unroll
            for (int e = 0; e < N; ++e) part[g * head_dim + p * N + e] = acc[e];
        }
    }
    __syncthreads();
    for (u32 d = tid; d < head_dim; d += blockDim.x) {
        A total = (A)0;
        for (u32 gg = 0; gg < groups; ++gg) total += part[gg * head_dim + d];
        out[2 + d] = total;
    }
    if (tid == 0) {
        out[0] = m;
        out[1] = sum;
    }
}

// The runs of row `row` combined into out[row] = sum_r acc_r * exp(m_r - M) / sum_r s_r *
// exp(m_r - M) over the runs in order, M their largest max, by the last of the row's blocks to
// finish: each block, after writing its run, takes a ticket (its writes made visible first);
// the one that draws splits - 1 reads the others' runs (volatile: past this multiprocessor's
// cache) and sets the ticket back to zero for the next launch.
template <typename T>
DEVICE void attn_combine_runs(const typename Acc<T>::type* partial, T* out, u32* tickets, u32 splits,
                              u32 head_dim) {
    typedef typename Acc<T>::type A;
    __shared__ u32 last;
    const u64 row = blockIdx.x;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&tickets[row], 1u) == splits - 1 ? 1u : 0u;
    __syncthreads();
    if (last == 0u) return;
    __threadfence();
    const volatile A* p = partial + row * splits * (u64)(head_dim + 2);
    const A neg_inf = m_neg_inf((A)0);
    A m = neg_inf;
    // unrolled: the runs' loads are independent, several in flight
#pragma unroll 8
    for (u32 r = 0; r < splits; ++r) {
        const A mr = p[r * (head_dim + 2)];
        m = mr > m ? mr : m;
    }
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
        A s = (A)0, acc = (A)0;
#pragma unroll 8
        for (u32 r = 0; r < splits; ++r) {
            const volatile A* run = p + r * (head_dim + 2);
            const A mr = run[0];
            if (mr == neg_inf) continue;
            const A f = m_exp(mr - m);
            s += run[1] * f;
            acc += run[2 + d] * f;
        }
        out[row * head_dim + d] = cvt<T>(acc / s);
    }
    if (threadIdx.x == 0) tickets[row] = 0u;
}

// 16-byte packs where every cache row is whole aligned packs, else an element at a time; then
// the row's runs combined by its last block.
template <typename T, typename C>
DEVICE void attention_split(const T* q, const C* k, const C* v, const u32* positions, typename Acc<T>::type* partial,
                            T* out, u32* tickets, u32 heads, u32 kv_heads, u32 queries, u32 head_dim,
                            u32 cache_len, float scale, u32 mode, u32 positions_stride) {
    constexpr int N = 16 / sizeof(C);
    if (head_dim % N == 0 && (usize)k % 16 == 0 && (usize)v % 16 == 0)
        attention_split_impl<T, C, N>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim, cache_len,
                                   scale, mode, positions_stride);
    else
        attention_split_impl<T, C, 1>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim, cache_len,
                                   scale, mode, positions_stride);
    attn_combine_runs<T>(partial, out, tickets, gridDim.y, head_dim);
}

// A decode step's rotary embedding and cache write in one launch: qkv is (t, (heads + 2 kv_heads)
// * d), each token's q heads, k heads, v heads, at positions[token]; cos and sin are
// (max_len, d / 2). q_out (heads, t, d) gets the roped q, and the cache rows at each token's
// position of k_cache and v_cache (kv_heads, cache_len, d) the roped k and the v. With
// per_token_cache each token is a sequence of its own (a batch's decode step): token i writes
// the i-th of t caches (t, kv_heads, cache_len, d) and q_out is (t, heads, d). Rotation on
// the pairs (2i, 2i + 1) (interleaved) or (i, i + d / 2), as rope_i / rope compute it. A
// position past the cache (a bound the host keeps) writes nothing there and leaves its q
// unrotated. One thread a rotated pair of q and k, then one a v value.
// rope_kv_write's row of q_out for (head, token), and its cache row of a token's kv head at pos.
DEVICE u64 rope_kv_q_row(u64 head, u64 token, u32 t, u32 heads, u32 per_token_cache) {
    return per_token_cache ? token * heads + head : head * t + token;
}
DEVICE u64 rope_kv_cache_row(u64 kv_head, u64 token, u32 pos, u32 kv_heads, u32 cache_len, u32 per_token_cache) {
    return ((per_token_cache ? token * kv_heads : 0) + kv_head) * cache_len + pos;
}

template <typename T, typename C>
DEVICE void rope_kv_write(const T* qkv, const T* cos, const T* sin, const u32* positions, T* q_out, C* k_cache,
                          C* v_cache, u32 t, u32 heads, u32 kv_heads, u32 d, u32 cache_len, u32 interleaved,
                          u32 per_token_cache) {
    typedef typename Acc<T>::type A;
    const u64 half = d / 2, width = (u64)(heads + 2 * kv_heads) * d;
    const u64 pairs = (u64)t * (heads + kv_heads) * half;
    const u64 values = (u64)t * kv_heads * d;
    for (u64 i = grid_tid(); i < pairs + values; i += grid_threads()) {
        if (i < pairs) {
            const u64 token = i / ((heads + kv_heads) * half), rest = i % ((heads + kv_heads) * half);
            const u32 head = (u32)(rest / half);
            const u64 p = rest % half;
            const u32 pos = positions[token];
            const u64 i1 = interleaved ? 2 * p : p, i2 = interleaved ? 2 * p + 1 : p + half;
            const T* x = qkv + token * width + (u64)head * d;
            if (pos >= cache_len) {
                if (head < heads) {
                    T* y = q_out + rope_kv_q_row(head, token, t, heads, per_token_cache) * d;
                    y[i1] = x[i1];
                    y[i2] = x[i2];
                }
                continue;
            }
            const A x1 = cvt<A>(x[i1]), x2 = cvt<A>(x[i2]);
            const u64 cs = (u64)pos * half + p;
            const A cc = cvt<A>(cos[cs]), ss = cvt<A>(sin[cs]);
            const A y1 = x1 * cc - x2 * ss, y2 = x1 * ss + x2 * cc;
            if (head < heads) {
                T* y = q_out + rope_kv_q_row(head, token, t, heads, per_token_cache) * d;
                y[i1] = cvt<T>(y1);
                y[i2] = cvt<T>(y2);
            } else {
                // rounded to T first, as a rope in T then a cast to the cache's dtype would
                C* y = k_cache + rope_kv_cache_row(head - heads, token, pos, kv_heads, cache_len, per_token_cache) * d;
                y[i1] = cvt<C>(cvt<A>(cvt<T>(y1)));
                y[i2] = cvt<C>(cvt<A>(cvt<T>(y2)));
            }
        } else {
            const u64 j = i - pairs, token = j / ((u64)kv_heads * d), rest = j % ((u64)kv_heads * d);
            const u32 pos = positions[token];
            if (pos >= cache_len) continue;
            const u64 head = rest / d, e = rest % d;
            v_cache[rope_kv_cache_row(head, token, pos, kv_heads, cache_len, per_token_cache) * d + e] = cvt<C>(cvt<A>(qkv[token * width + (heads + kv_heads + head) * d + e]));
        }
    }
}

// The three entries of queries of T over a cache of C, by their names. ATTN_PARAMS (both
// attention forms) and ROPE_KV_PARAMS: the parameter lists declared in rocm-kernels
// (`attention::{Params, RopeKvParams}`).
#define ATTENTION_ENTRY_SET(SPLIT, ROPE, CACHED, T, C)                                           \
    KERNEL __launch_bounds__(ATTN_SPLIT_THREADS) void SPLIT(ATTN_PARAMS(T, C)) {                 \
        attention_split<T, C>(q, k, v, positions, (Acc<T>::type*)partial, out, tickets, heads,   \
                              kv_heads, queries, head_dim, cache_len, scale, mode,               \
                              positions_stride);                                                 \
    }                                                                                            \
    KERNEL void ROPE(ROPE_KV_PARAMS(T, C)) {                                                     \
        rope_kv_write<T, C>(qkv, cos, sin, positions, q_out, k_cache, v_cache, t, heads,         \
                            kv_heads, d, cache_len, interleaved, per_token_cache);               \
    }                                                                                            \
    KERNEL __launch_bounds__(ATTN_BLOCK) void CACHED(ATTN_PARAMS(T, C)) {                        \
        cached_attention_any<T, C>(q, k, v, positions, out, heads, kv_heads, queries, head_dim,  \
                                   cache_len, scale, mode, positions_stride);                    \
    }
// `<op>_<NAME>`: the cache in the queries' dtype.
#define ATTENTION_ENTRIES(NAME, T)                                                               \
    ATTENTION_ENTRY_SET(attention_split_##NAME, rope_kv_write_##NAME, cached_attention_##NAME, T, T)
// `<op>_cache_<CN>_<NAME>`: a cache of C.
#define ATTENTION_ENTRIES_CACHE(NAME, T, CN, C)                                                  \
    ATTENTION_ENTRY_SET(attention_split_cache_##CN##_##NAME, rope_kv_write_cache_##CN##_##NAME, \
                        cached_attention_cache_##CN##_##NAME, T, C)
CANDLE_ROCM_KEEP(bf16)(ATTENTION_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(ATTENTION_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ATTENTION_ENTRIES(f32, float))
// f32 queries over a 16-bit cache
CANDLE_ROCM_KEEP(f32)(ATTENTION_ENTRIES_CACHE(f32, float, f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ATTENTION_ENTRIES_CACHE(f32, float, bf16, bf16_t))
CANDLE_ROCM_KEEP(f64)(ATTENTION_ENTRIES(f64, double))
