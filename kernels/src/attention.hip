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
DEVICE void attention_split_row_impl(const T* q, const C* k, const C* v, const u32* positions,
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

// The grouped split: a block of ATTN_GROUP_THREADS threads per (group of query rows, run of
// cache positions) writes each row's run as attention_split_row_impl does; a group is `group`
// query heads of one kv head at one query position (grouped-query attention: each cache row is
// read once for all of them, up to ATTN_GROUP_HEADS). A run is `run_keys` positions (the host
// sizes runs so that the launch fills the device), taken a tile of `tile_keys` at a time: the
// tile's key and value rows copied into shared memory at once (16-byte copies in flight
// together: a step's attention waits on memory), then
// - scores: thread (key j, part h of the row) sums its part of the row against each head's q
//   (the key values read once for all heads, q broadcast from shared memory); the parts added
//   in order;
// - softmax: a warp a head, online over the run's tiles (running max and sum);
// - weights x v: thread (16-byte pack p of the row, key group kg) adds the keys kg, kg + groups,
//   ... into each head's sums, rescaled where a head's max moved; the groups' sums are added in
//   order at the run's end.
// Rows in shared memory are padded by 16 bytes, so the rows of consecutive keys start 4 banks
// apart. Runs past a row's last visible position write an empty run (max -inf, sums 0).
// A block has ATTN_GROUP_THREADS threads, or more where a row has more packs (at most
// ATTN_GROUP_MAX_THREADS: rows of up to 256 elements read an element at a time).
#define ATTN_GROUP_THREADS 128
#define ATTN_GROUP_MAX_THREADS 256
#define ATTN_GROUP_HEADS 8

// The first query row of block row `block_row` of a split launch (groups of `group` heads) and
// the row's kv head: block rows are (batch, head group, query), head groups in kv-head order.
struct AttnGroup {
    u64 b;
    u32 h0, kv_head, i;
};
DEVICE AttnGroup attn_group(u64 block_row, u32 group, u32 heads, u32 kv_heads, u32 queries) {
    AttnGroup r;
    r.i = (u32)(block_row % queries);
    const u64 bg = block_row / queries;
    const u32 groups_a_batch = heads / group;
    r.h0 = (u32)(bg % groups_a_batch) * group;
    r.b = bg / groups_a_batch;
    r.kv_head = r.h0 / (heads / kv_heads);
    return r;
}
DEVICE u64 attn_row(AttnGroup g, u32 head, u32 heads, u32 queries) {
    return (g.b * heads + g.h0 + head) * queries + g.i;
}

// Bytes rounded up to whole 16-byte packs.
DEVICE u32 attn_round16(u32 bytes) { return (bytes + 15) / 16 * 16; }

template <typename T, typename C, int N, int GM>
DEVICE void attention_split_grouped_impl(const T* q, const C* k, const C* v, const u32* positions,
                                         typename Acc<T>::type* partial, u32 heads, u32 kv_heads,
                                         u32 queries, u32 head_dim, u32 cache_len, float scale, u32 mode,
                                         u32 positions_stride, u32 group, u32 tile_keys, u32 run_keys) {
    typedef typename Acc<T>::type A;
    typedef Pack<C, N> P;
    extern __shared__ Raw16 attn_shared[];
    const u32 tid = threadIdx.x, lane = tid % warpSize, warp = tid / warpSize;
    const u32 nthreads = blockDim.x, warps = nthreads / warpSize;
    const u32 split = blockIdx.y, splits = gridDim.y;
    const AttnGroup grp = attn_group(blockIdx.x, group, heads, kv_heads, queries);
    const u64 cache_start = (grp.b * kv_heads + grp.kv_head) * (u64)cache_len * head_dim;
    const u32 len = attn_last(positions + grp.b * positions_stride, grp.i, queries, cache_len, mode) + 1;
    const u32 first = split * run_keys;
    const u32 n = first >= len ? 0 : (len - first < run_keys ? len - first : run_keys);
    // the group's rows' runs: row g's is head_stride after row 0's
    A* out = partial + (attn_row(grp, 0, heads, queries) * splits + split) * (u64)(head_dim + 2);
    const u64 head_stride = (u64)queries * splits * (head_dim + 2);
    const A neg_inf = m_neg_inf((A)0);
    if (n == 0) {
        for (u32 g = 0; g < group; ++g)
            for (u32 d = tid; d < head_dim + 2; d += nthreads) out[g * head_stride + d] = d == 0 ? neg_inf : (A)0;
        return;
    }
    // shared memory (attn_split_shared_bytes on the host): key and value tiles, q, the scores'
    // parts, the weights, each head's running max, sum and rescale, the groups' sums
    const u32 R = tile_keys, packs = head_dim / N, ld = packs + (16 / sizeof(P) > 1 ? 16 / sizeof(P) : 1);
    const u32 parts = nthreads / R;
    unsigned char* base = (unsigned char*)attn_shared;
    const u32 tile_bytes = attn_round16(R * ld * sizeof(P));
    P* ks = (P*)base;
    P* vs = (P*)(base + tile_bytes);
    A* qs = (A*)(base + 2 * tile_bytes);
    A* sp = qs + GM * head_dim;           // [parts][GM][R]
    A* ws = sp + parts * GM * R;          // [R][GM]
    A* stat = ws + R * GM;                // [3][GM]: max, sum, rescale
    A* part = stat + 3 * GM;              // [groups][head_dim]
    for (u32 g = 0; g < group; ++g) {
        const u64 row = attn_row(grp, g, heads, queries);
        for (u32 d = tid; d < head_dim; d += nthreads) qs[g * head_dim + d] = cvt<A>(q[row * head_dim + d]) * (A)scale;
    }
    if (tid < GM) {
        stat[tid] = neg_inf;
        stat[GM + tid] = (A)0;
    }
    const P* kr = reinterpret_cast<const P*>(k + cache_start);
    const P* vr = reinterpret_cast<const P*>(v + cache_start);
    // this thread's key and part of the row in the scores, its pack and key group in v
    const u32 j_mine = tid % R, h_mine = tid / R;
    const u32 part_packs = (packs + parts - 1) / parts;
    const u32 p_lo = h_mine * part_packs, p_hi = p_lo + part_packs < packs ? p_lo + part_packs : packs;
    // v: a pack a thread (the host gives a block at least as many threads as packs)
    const u32 vgroups = nthreads / packs, kg = tid / packs, pv = tid % packs;
    A acc[GM][N];
#pragma unroll
    for (int g = 0; g < GM; ++g)
#pragma unroll
        for (int e = 0; e < N; ++e) acc[g][e] = (A)0;
    for (u32 t0 = 0; t0 < n; t0 += R) {
        const u32 nt = n - t0 < R ? n - t0 : R;
        const u64 row0 = (u64)first + t0;
        // the tile's rows: 16-byte copies in flight together, or element by element
        for (u32 i = tid; i < nt * packs; i += nthreads) {
            const u32 r = i / packs, pp = i % packs;
            if (N > 1) {
                async_copy16(ks + r * ld + pp, kr + (row0 + r) * packs + pp, 16);
                async_copy16(vs + r * ld + pp, vr + (row0 + r) * packs + pp, 16);
            } else {
                ks[r * ld + pp] = kr[(row0 + r) * packs + pp];
                vs[r * ld + pp] = vr[(row0 + r) * packs + pp];
            }
        }
        async_commit();
        async_wait<0>();
        __syncthreads();
        // scores' parts
        {
            A dot[GM];
#pragma unroll
            for (int g = 0; g < GM; ++g) dot[g] = (A)0;
            if (j_mine < nt) {
                for (u32 pp = p_lo; pp < p_hi; ++pp) {
                    const P kp = ks[j_mine * ld + pp];
                    A kw[N];
#pragma unroll
                    for (int e = 0; e < N; ++e) kw[e] = cvt<A>(kp.v[e]);
#pragma unroll
                    for (int g = 0; g < GM; ++g) {
                        if (GM > 1 && (u32)g >= group) continue;
                        const A* qg = qs + g * head_dim + pp * N;
#pragma unroll
                        for (int e = 0; e < N; ++e) dot[g] += qg[e] * kw[e];
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < GM; ++g) sp[(h_mine * GM + g) * R + j_mine] = dot[g];
        }
        __syncthreads();
        // the online softmax, a warp a head: the tile's weights, the head's max, sum and rescale
        for (u32 g = warp; g < group; g += warps) {
            A mx = neg_inf;
            for (u32 j = lane; j < nt; j += warpSize) {
                A s = (A)0;
                for (u32 h = 0; h < parts; ++h) s += sp[(h * GM + g) * R + j];
                sp[g * R + j] = s;  // part 0's slot holds the score (only this lane reads it)
                mx = s > mx ? s : mx;
            }
            mx = warp_max(mx);
            const A m_old = stat[g], m_new = mx > m_old ? mx : m_old;
            A sum = (A)0;
            for (u32 j = lane; j < R; j += warpSize) {
                const A w = j < nt ? m_exp(sp[g * R + j] - m_new) : (A)0;
                ws[j * GM + g] = w;
                sum += w;
            }
            sum = warp_sum(sum);
            // m is -inf only before the first tile, where the sums are still 0
            const A rescale = m_old == neg_inf ? (A)0 : m_exp(m_old - m_new);
            if (lane == 0) {
                stat[g] = m_new;
                stat[GM + g] = stat[GM + g] * rescale + sum;
                stat[2 * GM + g] = rescale;
            }
        }
        __syncthreads();
        // weights x v
        if (kg < vgroups) {
#pragma unroll
            for (int g = 0; g < GM; ++g) {
                if (GM > 1 && (u32)g >= group) continue;
                const A r = stat[2 * GM + g];
#pragma unroll
                for (int e = 0; e < N; ++e) acc[g][e] *= r;
            }
            for (u32 j = kg; j < nt; j += vgroups) {
                const P vp = vs[j * ld + pv];
                A x[N];
#pragma unroll
                for (int e = 0; e < N; ++e) x[e] = cvt<A>(vp.v[e]);
#pragma unroll
                for (int g = 0; g < GM; ++g) {
                    if (GM > 1 && (u32)g >= group) continue;
                    const A w = ws[j * GM + g];
#pragma unroll
                    for (int e = 0; e < N; ++e) acc[g][e] += w * x[e];
                }
            }
        }
        __syncthreads();  // the tiles, scores and weights are rewritten by the next tile
    }
    // each head's groups' sums, in order
    for (u32 g = 0; g < group; ++g) {
        if (kg < vgroups) {
#pragma unroll
            for (int gg = 0; gg < GM; ++gg)
                if ((u32)gg == g)
#pragma unroll
                    for (int e = 0; e < N; ++e) part[kg * head_dim + pv * N + e] = acc[gg][e];
        }
        __syncthreads();
        A* o = out + g * head_stride;
        for (u32 d = tid; d < head_dim; d += nthreads) {
            A total = (A)0;
            for (u32 gg = 0; gg < vgroups; ++gg) total += part[gg * head_dim + d];
            o[2 + d] = total;
        }
        if (tid == 0) {
            o[0] = stat[g];
            o[1] = stat[GM + g];
        }
        __syncthreads();  // part is rewritten by the next head
    }
}

// The grouped split on the matrix units (16-bit caches: C is bf16 or f16, T is C or f32): a
// block of warps takes a group of up to ATTN_MATRIX_ROWS query heads of one kv head at one query
// position (the rows of one 16-row tile) and a run of `run_keys` cache positions; each warp
// takes every warps-th tile of ATTN_MATRIX_KEYS positions of the run and keeps its own online
// softmax, o of the group's rows in the accumulators:
// - its tiles' key and value rows copied into its own shared memory, the next tile's copies in
//   flight while the current one is scored (two stages a warp; no block-wide barrier in the loop);
// - scores s = q k^T (q: the group's rows, zeros past it, read from shared memory at every
//   k-step) and o += p v on compat.h's 16x16x16 tile operation, in f32;
// - f32 queries are held as two 16-bit parts (hi, and the rest rounded again: about twice C's
//   precision), each row first scaled by a power of two that puts its largest value near 2^14
//   (f16 holds it, and its rest is not subnormal), and p is passed the same way: both products
//   carry f32's work to within a few ulps of it; under 16-bit queries q is exact in C and p is
//   rounded to C, as flash attention does.
// At the run's end the warps' maxes, sums and o are combined through shared memory into the
// run's values of each row (attention_split_row_impl's layout; its max in natural-log units).
#define ATTN_MATRIX_KEYS 16
#define ATTN_MATRIX_ROWS 16
#define ATTN_MATRIX_STAGES 2
#define ATTN_MATRIX_MAX_WARPS 4

// A warp's copies of matrix-form tiles (key rows, then value rows, stride DMAX + 8, in a stage
// of its shared memory): lane l copies the 16-byte chunk l % (DMAX / 8) of rows l / (DMAX / 8),
// + warpSize / (DMAX / 8), ..., its offsets taken once; rows past the run's `n` positions and
// chunks past head_dim are zeros.
template <typename C, int DMAX> struct AttnMatrixLoader {
    static constexpr u32 LD = DMAX + 8, BK = ATTN_MATRIX_KEYS, CHUNKS = DMAX / 8;
    const C* k;
    const C* v;
    u32 first, n, head_dim, row, step, col;
    bool col_in;
    DEVICE AttnMatrixLoader(const C* k_, const C* v_, u32 first_, u32 n_, u32 head_dim_)
        : k(k_), v(v_), first(first_), n(n_), head_dim(head_dim_) {
        const u32 lane = mma_lane();
        row = lane / CHUNKS;
        step = warpSize / CHUNKS;
        col = (lane % CHUNKS) * 8;
        col_in = col < head_dim;
    }
    // tile `tile` of the run into `dst`
    DEVICE void load(C* dst, u32 tile) const {
        const u32 rows = n - tile * BK < BK ? n - tile * BK : BK;
        u64 at = (u64)(first + tile * BK + row) * head_dim + col;
        const u64 at_step = (u64)step * head_dim;
        C* to = dst + row * LD + col;
        for (u32 r = row; r < BK; r += step, at += at_step, to += step * LD) {
            const bool in = col_in && r < rows;
            async_copy16(to, in ? k + at : k, in ? 16 : 0);
            async_copy16(to + BK * LD, in ? v + at : v, in ? 16 : 0);
        }
    }
};

template <typename T, typename C, int DMAX>
DEVICE void attention_split_matrix_impl(const T* q, const C* k, const C* v, const u32* positions,
                                        typename Acc<T>::type* partial, u32 heads, u32 kv_heads, u32 queries,
                                        u32 head_dim, u32 cache_len, float scale, u32 mode, u32 positions_stride,
                                        u32 group, u32 run_keys) {
    constexpr u32 LD = DMAX + 8, KSTEPS = DMAX / 16, BK = ATTN_MATRIX_KEYS;
    constexpr bool SPLIT = sizeof(T) != sizeof(C);  // f32 queries
    constexpr u32 QPARTS = SPLIT ? 2 : 1;
    constexpr u32 STAGE = 2 * BK * LD;  // a stage: a key tile, then a value tile
    constexpr u32 WARP_ELEMS = ATTN_MATRIX_STAGES * STAGE + 16 * MMA_SCRATCH_LD;
    extern __shared__ Raw16 attn_shared[];
    const u32 lane = mma_lane(), warp = threadIdx.x / warpSize, warps = blockDim.x / warpSize;
    const u32 split = blockIdx.y, splits = gridDim.y;
    const AttnGroup grp = attn_group(blockIdx.x, group, heads, kv_heads, queries);
    const u64 cache_start = (grp.b * kv_heads + grp.kv_head) * (u64)cache_len * head_dim;
    const u32 len = attn_last(positions + grp.b * positions_stride, grp.i, queries, cache_len, mode) + 1;
    const u32 first = split * run_keys;
    const u32 n = first >= len ? 0 : (len - first < run_keys ? len - first : run_keys);
    float* out = partial + (attn_row(grp, 0, heads, queries) * splits + split) * (u64)(head_dim + 2);
    const u64 head_stride = (u64)queries * splits * (head_dim + 2);
    const float neg_inf = m_neg_inf(0.0f), log2e = 1.4426950408889634f, ln2 = 0.6931471805599453f;
    if (n == 0) {
        for (u32 g = 0; g < group; ++g)
            for (u32 d = threadIdx.x; d < head_dim + 2; d += blockDim.x)
                out[g * head_stride + d] = d == 0 ? neg_inf : 0.0f;
        return;
    }
    // shared memory (the host's matrix_shared_bytes): q's parts (16 x LD each), each row's
    // power of two, then a warp's two stages and its scratch tile
    C* qs = (C*)attn_shared;
    float* row_pow = (float*)(qs + QPARTS * 16 * LD);
    C* mine = (C*)(row_pow + 16) + warp * WARP_ELEMS;
    C* scratch = mine + ATTN_MATRIX_STAGES * STAGE;
    const C* kr = k + cache_start;
    const C* vr = v + cache_start;
    const u32 tiles = (n + BK - 1) / BK, dsteps = (head_dim + 15) / 16;
    const AttnMatrixLoader<C, DMAX> loader(kr, vr, first, n, head_dim);
    // the first tile's copies go out first: q's loading below overlaps them
    if (warp < tiles) loader.load(mine, warp);
    async_commit();
    // f32 queries: each row's largest magnitude (the bits of non-negative floats order as the
    // floats do), then its power of two
    if (SPLIT) {
        u32* row_big = (u32*)row_pow;
        if (threadIdx.x < 16) row_big[threadIdx.x] = 0u;
        __syncthreads();
#pragma unroll 4
        for (u32 i = threadIdx.x; i < group * head_dim; i += blockDim.x) {
            const u32 g = i / head_dim, d = i % head_dim;
            const float x = cvt<float>(q[attn_row(grp, g, heads, queries) * head_dim + d]);
            atomicMax(&row_big[g], f32_bits(fabsf(x)));
        }
        __syncthreads();
        if (threadIdx.x < 16) {
            // big < 2^ex: the row is scaled by 2^up = 2^(14 - ex), within f32's normal range
            const u32 big = row_big[threadIdx.x];
            const i32 ex = big > 0u ? (i32)((big >> 23) & 0xffu) - 126 : 14;
            i32 up = 14 - ex;
            up = up > 126 ? 126 : (up < -126 ? -126 : up);
            row_pow[threadIdx.x] = f32_from_bits((u32)(127 - up) << 23);
        }
        __syncthreads();
    }
    // q's parts (rows past the group and dims past head_dim are zeros)
#pragma unroll 4
    for (u32 i = threadIdx.x; i < 16 * DMAX; i += blockDim.x) {
        const u32 g = i / DMAX, d = i % DMAX;
        float x = 0.0f;
        if (g < group && d < head_dim) {
            x = cvt<float>(q[attn_row(grp, g, heads, queries) * head_dim + d]);
            if (SPLIT) x /= row_pow[g];  // exact: a power of two
        }
        const C hi = cvt<C>(x);
        qs[g * LD + d] = hi;
        if (SPLIT) qs[(16 + g) * LD + d] = cvt<C>(x - cvt<float>(hi));
    }
    __syncthreads();
    // each row's multiplier into log2 units (and back from its power of two)
    float mul[MMA_ROW_SLOTS];
#pragma unroll
    for (u32 e = 0; e < MMA_C; ++e) {
        u32 r, c;
        mma_c_at(e, r, c);
        mul[mma_c_slot(e)] = scale * log2e * (SPLIT ? row_pow[r] : 1.0f);
    }
    float o[KSTEPS][MMA_C], m[MMA_ROW_SLOTS], l[MMA_ROW_SLOTS];
#pragma unroll
    for (u32 t = 0; t < KSTEPS; ++t)
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) o[t][e] = 0.0f;
#pragma unroll
    for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) { m[r] = neg_inf; l[r] = 0.0f; }
    const MmaShared<C, MMA_FRAG_A> q_frag(qs, LD);
    const MmaShared<C, MMA_FRAG_B_NK> k_frag(mine, LD);
    const MmaShared<C, MMA_FRAG_B_KN> v_frag(mine + BK * LD, LD);
    u32 st = 0;
    for (u32 tile = warp; tile < tiles; tile += warps, st ^= 1) {
        if (tile + warps < tiles) loader.load(mine + (st ^ 1) * STAGE, tile + warps);
        async_commit();
        async_wait<1>();
        mma_warp_sync();  // every lane's copies of this tile have landed
        const u32 at = st * STAGE, rows = n - tile * BK < BK ? n - tile * BK : BK;
        float s[MMA_C];
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) s[e] = 0.0f;
#pragma unroll
        for (u32 t = 0; t < KSTEPS; ++t) {
            if (t < dsteps) {
                u32 kb[MMA_B / 2], qa[MMA_A / 2];
                k_frag.load(kb, at + t * 16);
                q_frag.load(qa, t * 16);
                mma_16x16x16<C>(qa, kb, s);
                if (SPLIT) {
                    q_frag.load(qa, 16 * LD + t * 16);
                    mma_16x16x16<C>(qa, kb, s);
                }
            }
        }
        // the online softmax in log2 units; keys past the run are masked
        float mx[MMA_ROW_SLOTS];
#pragma unroll
        for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) mx[r] = neg_inf;
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) {
            u32 r, c;
            mma_c_at(e, r, c);
            const u32 slot = mma_c_slot(e);
            const float x = c < rows ? s[e] * mul[slot] : neg_inf;
            s[e] = x;
            mx[slot] = x > mx[slot] ? x : mx[slot];
        }
        float base[MMA_ROW_SLOTS], rescale[MMA_ROW_SLOTS];
        bool moved = false;
#pragma unroll
        for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) {
            const float row_max = warp_combine<MaxOf<float> >(mx[r], MMA_ROW_LANES);
            const float m_new = row_max > m[r] ? row_max : m[r];
            base[r] = m_new == neg_inf ? 0.0f : m_new;
            rescale[r] = m_exp2_fast(m[r] - base[r]);
            moved |= m_new != m[r];
            l[r] *= rescale[r];
            m[r] = m_new;
        }
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) {
            const u32 slot = mma_c_slot(e);
            const float w = m_exp2_fast(s[e] - base[slot]);
            s[e] = w;
            l[slot] += w;
        }
        // o keeps its scale where no row of the warp found a larger score
        if (warp_ballot(moved)) {
#pragma unroll
            for (u32 t = 0; t < KSTEPS; ++t)
#pragma unroll
                for (u32 e = 0; e < MMA_C; ++e) o[t][e] *= rescale[mma_c_slot(e)];
        }
        u32 pa[MMA_A / 2], pl[MMA_A / 2];
        if (SPLIT) {
            float rest[MMA_C];
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) rest[e] = s[e] - cvt<float>(cvt<C>(s[e]));
            mma_c_to_a<C>(rest, pl, scratch);
        }
        mma_c_to_a<C>(s, pa, scratch);
#pragma unroll
        for (u32 t = 0; t < KSTEPS; ++t) {
            if (t < dsteps) {
                u32 vb[MMA_B / 2];
                v_frag.load(vb, at + t * 16);
                mma_16x16x16<C>(pa, vb, o[t]);
                if (SPLIT) mma_16x16x16<C>(pl, vb, o[t]);
            }
        }
        mma_warp_sync();  // every lane is done with the stage the next copies go to
    }
    async_wait<0>();
    // the warps' states (each over its own stages): o [16][DMAX], then max and sum a row
#pragma unroll
    for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) l[r] = warp_combine<SumOf<float> >(l[r], MMA_ROW_LANES);
    __syncthreads();
    // warp w's state: its region's first floats
    C* const regions = (C*)(row_pow + 16);
    float* ws = (float*)mine;
#pragma unroll
    for (u32 t = 0; t < KSTEPS; ++t)
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) {
            u32 r, c;
            mma_c_at(e, r, c);
            ws[r * DMAX + t * 16 + c] = o[t][e];
            // a row's lanes hold the same max and sum: each writes them
            ws[16 * DMAX + r] = m[mma_c_slot(e)];
            ws[16 * DMAX + 16 + r] = l[mma_c_slot(e)];
        }
    __syncthreads();
    // value d of row g: 0 the max (natural-log units), 1 the sum, 2 + d' o's dim d'
    for (u32 i = threadIdx.x; i < group * (head_dim + 2); i += blockDim.x) {
        const u32 g = i / (head_dim + 2), d = i % (head_dim + 2);
        float big = neg_inf;
        for (u32 w = 0; w < warps; ++w) {
            const float mw = ((const float*)(regions + w * WARP_ELEMS))[16 * DMAX + g];
            big = mw > big ? mw : big;
        }
        float total = 0.0f;
        for (u32 w = 0; w < warps; ++w) {
            const float* state = (const float*)(regions + w * WARP_ELEMS);
            const float mw = state[16 * DMAX + g];
            if (mw == neg_inf) continue;  // a warp without a tile
            const float x = d == 1 ? state[16 * DMAX + 16 + g] : state[g * DMAX + (d < 2 ? 0 : d - 2)];
            total += m_exp2_fast(mw - big) * x;
        }
        out[g * head_stride + d] = d == 0 ? (big == neg_inf ? neg_inf : big * ln2) : total;
    }
}

// The runs of each query row of a group combined into out[row] = sum_r acc_r * exp(m_r - M) /
// sum_r s_r * exp(m_r - M) over the runs in order, M their largest max, by the last of the
// group's blocks to finish: each block, after writing its runs, takes a ticket (its writes made
// visible first); the one that draws splits - 1 reads the others' runs (volatile: past this
// multiprocessor's cache) and sets the ticket back to zero for the next launch.
#define ATTN_COMBINE_BATCH 8
template <typename T>
DEVICE void attn_combine_runs(const typename Acc<T>::type* partial, T* out, u32* tickets, u32 splits,
                              u32 head_dim, u32 heads, u32 kv_heads, u32 queries, u32 group) {
    typedef typename Acc<T>::type A;
    __shared__ u32 last;
    const u64 block_row = blockIdx.x;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&tickets[block_row], 1u) == splits - 1 ? 1u : 0u;
    __syncthreads();
    if (last == 0u) return;
    __threadfence();
    const AttnGroup grp = attn_group(block_row, group, heads, kv_heads, queries);
    const A neg_inf = m_neg_inf((A)0);
    // a thread a (row, dim); the runs in batches of ATTN_COMBINE_BATCH whose loads are in flight
    // together (added in order: the result does not depend on the batching)
    for (u32 i = threadIdx.x; i < group * head_dim; i += blockDim.x) {
        const u32 g = i / head_dim, d = i % head_dim;
        const u64 row = attn_row(grp, g, heads, queries);
        const volatile A* p = partial + row * splits * (u64)(head_dim + 2);
        A m = neg_inf;
        for (u32 r0 = 0; r0 < splits; r0 += ATTN_COMBINE_BATCH) {
            A mr[ATTN_COMBINE_BATCH];
            // past the last run the last run is read again (no branch around the loads) and
            // dropped
#pragma unroll
            for (u32 j = 0; j < ATTN_COMBINE_BATCH; ++j) {
                const u32 r = r0 + j < splits ? r0 + j : splits - 1;
                const A x = p[r * (head_dim + 2)];
                mr[j] = r0 + j < splits ? x : neg_inf;
            }
#pragma unroll
            for (u32 j = 0; j < ATTN_COMBINE_BATCH; ++j) m = mr[j] > m ? mr[j] : m;
        }
        A s = (A)0, acc = (A)0;
        for (u32 r0 = 0; r0 < splits; r0 += ATTN_COMBINE_BATCH) {
            A mr[ATTN_COMBINE_BATCH], sr[ATTN_COMBINE_BATCH], ar[ATTN_COMBINE_BATCH];
#pragma unroll
            for (u32 j = 0; j < ATTN_COMBINE_BATCH; ++j) {
                const bool in = r0 + j < splits;
                const volatile A* run = p + (in ? r0 + j : splits - 1) * (head_dim + 2);
                const A x = run[0], y = run[1], z = run[2 + d];
                mr[j] = in ? x : neg_inf;
                sr[j] = y;
                ar[j] = z;
            }
#pragma unroll
            for (u32 j = 0; j < ATTN_COMBINE_BATCH; ++j) {
                if (mr[j] == neg_inf) continue;
                const A f = m_exp(mr[j] - m);
                s += sr[j] * f;
                acc += ar[j] * f;
            }
        }
        out[row * head_dim + d] = cvt<T>(acc / s);
    }
    if (threadIdx.x == 0) tickets[block_row] = 0u;
}

// 16-byte packs where every cache row is whole aligned packs, else an element at a time; then
// the group's runs combined by its last block. GM 1: a query row a block
// (attention_split_row_impl); else the grouped split.
template <typename T, typename C, int GM>
DEVICE void attention_split(const T* q, const C* k, const C* v, const u32* positions, typename Acc<T>::type* partial,
                            T* out, u32* tickets, u32 heads, u32 kv_heads, u32 queries, u32 head_dim,
                            u32 cache_len, float scale, u32 mode, u32 positions_stride, u32 group,
                            u32 tile_keys, u32 run_keys) {
    constexpr int N = 16 / sizeof(C);
    const bool wide = head_dim % N == 0 && (usize)k % 16 == 0 && (usize)v % 16 == 0;
    if constexpr (GM == 1) {
        group = 1;
        if (wide)
            attention_split_row_impl<T, C, N>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim,
                                              cache_len, scale, mode, positions_stride);
        else
            attention_split_row_impl<T, C, 1>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim,
                                              cache_len, scale, mode, positions_stride);
    } else if (wide) {
        attention_split_grouped_impl<T, C, N, GM>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim,
                                                  cache_len, scale, mode, positions_stride, group, tile_keys,
                                                  run_keys);
    } else {
        attention_split_grouped_impl<T, C, 1, GM>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim,
                                                  cache_len, scale, mode, positions_stride, group, tile_keys,
                                                  run_keys);
    }
    attn_combine_runs<T>(partial, out, tickets, gridDim.y, head_dim, heads, kv_heads, queries, group);
}

// The grouped split on the matrix units, then the group's runs combined by its last block.
template <typename T, typename C, int DMAX>
DEVICE void attention_split_matrix(const T* q, const C* k, const C* v, const u32* positions, float* partial, T* out,
                                   u32* tickets, u32 heads, u32 kv_heads, u32 queries, u32 head_dim, u32 cache_len,
                                   float scale, u32 mode, u32 positions_stride, u32 group, u32 run_keys) {
    attention_split_matrix_impl<T, C, DMAX>(q, k, v, positions, partial, heads, kv_heads, queries, head_dim, cache_len,
                                            scale, mode, positions_stride, group, run_keys);
    attn_combine_runs<T>(partial, out, tickets, gridDim.y, head_dim, heads, kv_heads, queries, group);
}

// A decode step's rotary embedding and cache write in one launch: qkv is (t, (heads + 2 kv_heads)
// * d), each token's q heads, k heads, v heads, at positions[token]; cos and sin are
// (max_len, d / 2). q_out (heads, t, d) gets the roped q, and the cache rows at each token's
// position of k_cache and v_cache (kv_heads, cache_len, d) the roped k and the v. With
// per_token_cache each token is a sequence of its own (a batch's decode step): token i writes
// the i-th of t caches (t, kv_heads, cache_len, d) and q_out is (t, heads, d). Rotation on
// the pairs (2i, 2i + 1) (interleaved) or (i, i + d / 2), as rope_i / rope compute it. With
// `normed`, each q and k head is first rms-normed by q_norm / k_norm (d values each; qwen3's
// per-head norms), the normed value rounded to T as the norm's own output would be. A
// position past the cache (a bound the host keeps) writes nothing there and leaves its q
// unrotated (normed). One warp a head: q and k heads, then v heads.
// rope_kv_write's row of q_out for (head, token), and its cache row of a token's kv head at pos.
DEVICE u64 rope_kv_q_row(u64 head, u64 token, u32 t, u32 heads, u32 per_token_cache) {
    return per_token_cache ? token * heads + head : head * t + token;
}
DEVICE u64 rope_kv_cache_row(u64 kv_head, u64 token, u32 pos, u32 kv_heads, u32 cache_len, u32 per_token_cache) {
    return ((per_token_cache ? token * kv_heads : 0) + kv_head) * cache_len + pos;
}

template <typename T, typename C>
DEVICE void rope_kv_write(const T* qkv, const T* cos, const T* sin, const u32* positions, T* q_out, C* k_cache,
                          C* v_cache, const T* q_norm, const T* k_norm, u32 t, u32 heads, u32 kv_heads, u32 d,
                          u32 cache_len, u32 interleaved, u32 per_token_cache, u32 normed, float eps) {
    typedef typename Acc<T>::type A;
    const u32 lane = threadIdx.x % warpSize, block_warps = blockDim.x / warpSize;
    const u64 half = d / 2, width = (u64)(heads + 2 * kv_heads) * d;
    const u64 qk_rows = (u64)t * (heads + kv_heads), rows = qk_rows + (u64)t * kv_heads;
    const u64 warps = (u64)gridDim.x * block_warps;
    // w is the same for a warp's lanes: every branch below is the warp's
    for (u64 w = (u64)blockIdx.x * block_warps + threadIdx.x / warpSize; w < rows; w += warps) {
        if (w >= qk_rows) {
            const u64 j = w - qk_rows, token = j / kv_heads, head = j % kv_heads;
            const u32 pos = positions[token];
            if (pos >= cache_len) continue;
            const T* x = qkv + token * width + (heads + kv_heads + head) * d;
            C* y = v_cache + rope_kv_cache_row(head, token, pos, kv_heads, cache_len, per_token_cache) * d;
            for (u64 e = lane; e < d; e += warpSize) y[e] = cvt<C>(cvt<A>(x[e]));
            continue;
        }
        const u64 token = w / (heads + kv_heads);
        const u32 head = (u32)(w % (heads + kv_heads));
        const u32 pos = positions[token];
        const T* x = qkv + token * width + (u64)head * d;
        const T* alpha = head < heads ? q_norm : k_norm;
        A scale = (A)1;
        if (normed != 0) {
            A ss = (A)0;
            for (u64 e = lane; e < d; e += warpSize) {
                const A v = cvt<A>(x[e]);
                ss += v * v;
            }
            ss = warp_sum(ss);
            scale = (A)1 / m_sqrt(ss / (A)d + (A)eps);
        }
        // the head's value i, normed as rms_norm writes it where `normed`
        auto value = [&](u64 i) -> A {
            return normed != 0 ? cvt<A>(cvt<T>(cvt<A>(x[i]) * scale * cvt<A>(alpha[i]))) : cvt<A>(x[i]);
        };
        for (u64 p = lane; p < half; p += warpSize) {
            const u64 i1 = interleaved ? 2 * p : p, i2 = interleaved ? 2 * p + 1 : p + half;
            const A x1 = value(i1), x2 = value(i2);
            if (pos >= cache_len) {
                if (head < heads) {
                    T* y = q_out + rope_kv_q_row(head, token, t, heads, per_token_cache) * d;
                    y[i1] = cvt<T>(x1);
                    y[i2] = cvt<T>(x2);
                }
                continue;
            }
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
        }
    }
}

// The four entries of queries of T over a cache of C, by their names. ATTN_PARAMS (both
// attention forms) and ROPE_KV_PARAMS: the parameter lists declared in rocm-kernels
// (`attention::{Params, RopeKvParams}`).
#define ATTENTION_SPLIT_ENTRY(NAME, T, C, GM, BOUND)                                             \
    KERNEL __launch_bounds__(BOUND) void NAME(ATTN_PARAMS(T, C)) {                               \
        attention_split<T, C, GM>(q, k, v, positions, (Acc<T>::type*)partial, out, tickets,      \
                                  heads, kv_heads, queries, head_dim, cache_len, scale, mode,    \
                                  positions_stride, group, tile_keys, run_keys);                 \
    }
// The grouped split on the matrix units (16-bit caches) for heads of up to DMAX elements:
// `attention_split_matrix_d<DMAX>_<dtype>`, and `..._cache_<cache dtype>_f32` under f32 queries.
#if defined(CANDLE_ROCM_MMA_SYNC)
#define ATTN_MATRIX_BOUND (ATTN_MATRIX_MAX_WARPS * 32)
#else
#define ATTN_MATRIX_BOUND (ATTN_MATRIX_MAX_WARPS * 64)
#endif
#define ATTENTION_MATRIX_ENTRY(NAME, T, C, DMAX)                                                 \
    KERNEL __launch_bounds__(ATTN_MATRIX_BOUND) void NAME(ATTN_PARAMS(T, C)) {                   \
        attention_split_matrix<T, C, DMAX>(q, k, v, positions, (float*)partial, out, tickets,     \
                                           heads, kv_heads, queries, head_dim, cache_len, scale,  \
                                           mode, positions_stride, group, run_keys);              \
    }
#define ATTENTION_MATRIX_ENTRIES(NAME, T)                                                        \
    ATTENTION_MATRIX_ENTRY(attention_split_matrix_d64_##NAME, T, T, 64)                          \
    ATTENTION_MATRIX_ENTRY(attention_split_matrix_d128_##NAME, T, T, 128)                        \
    ATTENTION_MATRIX_ENTRY(attention_split_matrix_d256_##NAME, T, T, 256)
#define ATTENTION_MATRIX_ENTRIES_CACHE(NAME, T, CN, C)                                           \
    ATTENTION_MATRIX_ENTRY(attention_split_matrix_d64_cache_##CN##_##NAME, T, C, 64)             \
    ATTENTION_MATRIX_ENTRY(attention_split_matrix_d128_cache_##CN##_##NAME, T, C, 128)           \
    ATTENTION_MATRIX_ENTRY(attention_split_matrix_d256_cache_##CN##_##NAME, T, C, 256)
#define ATTENTION_ENTRY_SET(SPLIT, GROUPED, ROPE, CACHED, T, C)                                  \
    ATTENTION_SPLIT_ENTRY(SPLIT, T, C, 1, ATTN_SPLIT_THREADS)                                    \
    ATTENTION_SPLIT_ENTRY(GROUPED, T, C, ATTN_GROUP_HEADS, ATTN_GROUP_MAX_THREADS)               \
    KERNEL void ROPE(ROPE_KV_PARAMS(T, C)) {                                                     \
        rope_kv_write<T, C>(qkv, cos, sin, positions, q_out, k_cache, v_cache, q_norm, k_norm,   \
                            t, heads, kv_heads, d, cache_len, interleaved, per_token_cache,      \
                            normed, eps);                                                        \
    }                                                                                            \
    KERNEL __launch_bounds__(ATTN_BLOCK) void CACHED(ATTN_PARAMS(T, C)) {                        \
        cached_attention_any<T, C>(q, k, v, positions, out, heads, kv_heads, queries, head_dim,  \
                                   cache_len, scale, mode, positions_stride);                    \
    }
// `<op>_<NAME>`: the cache in the queries' dtype.
#define ATTENTION_ENTRIES(NAME, T)                                                               \
    ATTENTION_ENTRY_SET(attention_split_##NAME, attention_split_grouped_##NAME, rope_kv_write_##NAME, \
                        cached_attention_##NAME, T, T)
// `<op>_cache_<CN>_<NAME>`: a cache of C.
#define ATTENTION_ENTRIES_CACHE(NAME, T, CN, C)                                                  \
    ATTENTION_ENTRY_SET(attention_split_cache_##CN##_##NAME,                                     \
                        attention_split_grouped_cache_##CN##_##NAME,                             \
                        rope_kv_write_cache_##CN##_##NAME, cached_attention_cache_##CN##_##NAME, \
                        T, C)
CANDLE_ROCM_KEEP(bf16)(ATTENTION_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(ATTENTION_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ATTENTION_ENTRIES(f32, float))
// f32 queries over a 16-bit cache
CANDLE_ROCM_KEEP(f32)(ATTENTION_ENTRIES_CACHE(f32, float, f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ATTENTION_ENTRIES_CACHE(f32, float, bf16, bf16_t))
CANDLE_ROCM_KEEP(f64)(ATTENTION_ENTRIES(f64, double))
CANDLE_ROCM_KEEP(bf16)(ATTENTION_MATRIX_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(ATTENTION_MATRIX_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ATTENTION_MATRIX_ENTRIES_CACHE(f32, float, f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ATTENTION_MATRIX_ENTRIES_CACHE(f32, float, bf16, bf16_t))
