// indexing.hip: index_select, gather, scatter (set and add) and index_add on strided layouts.
//
// Ids are any of Candle's index dtypes (u8, u32, i16, i32, i64). An id equal to its dtype's
// maximum is masked (Candle's convention): a gather yields zero, a scatter skips it. Any other
// id outside [0, n) never touches memory: it acts as masked and is counted in `bad` (when the
// host passes it) so CANDLE_ROCM_CHECK_INDICES=1 can turn it into an error.
//
// Kernels that only move values are instantiated per element width (w1 ... w16, entry
// `<op>_<id dtype>_<width>`): one instantiation serves every dtype of that size, and the host
// may view a run of elements as one wider unit. Accumulating kernels are per value dtype
// (`<op>_<id dtype>_<dtype>`) and add as the CPU backend does: through f32 for the 16- and
// 8-bit floats, wrapping for integers.
//
// Two ways to scatter, chosen by the host from the shape:
// - ownership (`*_own`): one thread per output column owns every update of that column and
//   applies them in increasing order along the dim: deterministic, and bit-exact with the CPU
//   loop for every dtype (a float sum is rounded in the same order);
// - per update (`scatter_add_atomic`, `scatter_claim` + `scatter_won`): one thread per source
//   element, for shapes with too few columns to fill the GPU. Adds are atomic; sets first
//   claim each destination for the last update along the dim (atomicMax of the update's
//   linear index + 1), so the CPU's "last one wins" holds there too.

template <typename I> struct IdMax;
template <> struct IdMax<u8> { static constexpr u8 v = 0xffu; };
template <> struct IdMax<u32> { static constexpr u32 v = 0xffffffffu; };
template <> struct IdMax<i16> { static constexpr i16 v = 0x7fff; };
template <> struct IdMax<i32> { static constexpr i32 v = 0x7fffffff; };
template <> struct IdMax<i64> { static constexpr i64 v = 0x7fffffffffffffffll; };

#define ID_MASKED (-1)
#define ID_BAD (-2)

// The position an id selects in a dim of n, ID_MASKED, or ID_BAD.
template <typename I> DEVICE i64 resolve_id(I v, u64 n) {
    if (v == IdMax<I>::v) return ID_MASKED;
    const i64 x = (i64)v;
    return (x < 0 || (u64)x >= n) ? ID_BAD : x;
}

// bad[0] counts lookups with an out-of-range id, bad[1] keeps one such id for the message.
DEVICE void report_bad(u64* bad, i64 raw) {
    if (bad) {
        atomicAdd(bad, 1ull);
        atomicExch(bad + 1, (u64)raw);
    }
}

// out[o] = src[src_view(o) + id(o) * dim_stride], id(o) = ids[ids_view(o)]. Both views walk
// the output's shape: src_view has stride 0 on the indexed dim; for index_select, ids_view is
// the 1-D ids broadcast over every other dim. The general path; the two below skip the index
// decoding for the common contiguous cases.
template <typename R, typename I>
DEVICE void gather_impl(const R* src, const I* ids, R* out, u64 n, u64 src_dim, u64 dim_stride,
                        const KernelLayout& src_view, const KernelLayout& ids_view, u64* bad) {
    for (u64 o = grid_tid(); o < n; o += grid_threads()) {
        const I v = ids[layout_offset(ids_view, o)];
        const i64 id = resolve_id(v, src_dim);
        R r = R();
        if (id >= 0) r = src[layout_offset(src_view, o) + (u64)id * dim_stride];
        else if (id == ID_BAD) report_bad(bad, (i64)v);
        out[o] = r;
    }
}

// index_select of a contiguous source seen as (left, src_dim, right): one block per output
// row (l, i) of `right` units, its id read once.
template <typename R, typename I>
DEVICE void index_rows_impl(const R* src, const I* ids, R* out, u64 rows, u64 n_ids, u64 right,
                            u64 src_dim, u64 ids_stride, u64* bad) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 l = row / n_ids;
        const I v = ids[(row % n_ids) * ids_stride];
        const i64 id = resolve_id(v, src_dim);
        R* o = out + row * right;
        if (id >= 0) {
            const R* s = src + (l * src_dim + (u64)id) * right;
            for (u64 r = threadIdx.x; r < right; r += blockDim.x) o[r] = s[r];
        } else {
            for (u64 r = threadIdx.x; r < right; r += blockDim.x) o[r] = R();
            if (id == ID_BAD && threadIdx.x == 0) report_bad(bad, (i64)v);
        }
    }
}

// gather along the last dim of contiguous src (rows, src_len) and ids (rows, m): one block
// per row.
template <typename R, typename I>
DEVICE void gather_last_impl(const R* src, const I* ids, R* out, u64 rows, u64 m, u64 src_len,
                             u64* bad) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const R* s = src + row * src_len;
        for (u64 j = threadIdx.x; j < m; j += blockDim.x) {
            const I v = ids[row * m + j];
            const i64 id = resolve_id(v, src_len);
            R r = R();
            if (id >= 0) r = s[id];
            else if (id == ID_BAD) report_bad(bad, (i64)v);
            out[row * m + j] = r;
        }
    }
}

// dst[col + id_i * dst_dim_stride] <- src[col + i * src_dim_stride] for i = 0 .. len in order,
// one thread per column (every coordinate but the dim).
template <typename T, typename I, typename Upd>
DEVICE void scatter_own_impl(T* dst, const I* ids, const T* src, u64 n_cols, u64 len, u64 dst_dim,
                             const KernelLayout& dst_cols, const KernelLayout& ids_cols,
                             const KernelLayout& src_cols, u64 dst_dim_stride, u64 ids_dim_stride,
                             u64 src_dim_stride, u64* bad, const Upd& upd) {
    for (u64 c = grid_tid(); c < n_cols; c += grid_threads()) {
        T* d = dst + layout_offset(dst_cols, c);
        const I* id_p = ids + layout_offset(ids_cols, c);
        const T* s = src + layout_offset(src_cols, c);
        for (u64 i = 0; i < len; ++i) {
            const I v = id_p[i * ids_dim_stride];
            const i64 id = resolve_id(v, dst_dim);
            if (id >= 0) upd(d[(u64)id * dst_dim_stride], s[i * src_dim_stride]);
            else if (id == ID_BAD) report_bad(bad, (i64)v);
        }
    }
}

struct SetUpd {
    template <typename T> DEVICE void operator()(T& d, T s) const { d = s; }
};

// a + b as the CPU backend computes it for T.
template <typename T> DEVICE T add_like_cpu(T a, T b) {
    typedef typename Acc<T>::type A;
    return cvt<T>(cvt<A>(a) + cvt<A>(b));
}
#define WRAPPING_ADD(T) \
    template <> DEVICE T add_like_cpu<T>(T a, T b) { return (T)((Wide<T>::type)a + (Wide<T>::type)b); }
WRAPPING_ADD(u8) WRAPPING_ADD(u32) WRAPPING_ADD(i16) WRAPPING_ADD(i32) WRAPPING_ADD(i64)

struct AddUpd {
    template <typename T> DEVICE void operator()(T& d, T s) const { d = add_like_cpu(d, s); }
};

// One thread per source element e: the destination of e is dst_view(e) + id(e) * dst_dim_stride.
template <typename T, typename I>
DEVICE void scatter_add_atomic_impl(T* dst, const I* ids, const T* src, u64 n, u64 dst_dim,
                                    u64 dst_dim_stride, const KernelLayout& dst_view,
                                    const KernelLayout& ids_view, const KernelLayout& src_view,
                                    u64* bad) {
    for (u64 e = grid_tid(); e < n; e += grid_threads()) {
        const I v = ids[layout_offset(ids_view, e)];
        const i64 id = resolve_id(v, dst_dim);
        if (id >= 0)
            atomic_add(dst + layout_offset(dst_view, e) + (u64)id * dst_dim_stride,
                       src[layout_offset(src_view, e)]);
        else if (id == ID_BAD) report_bad(bad, (i64)v);
    }
}

// Sets, pass 1: win[destination - dst start] = 1 + the largest e aimed at it (zeroed before).
template <typename I>
DEVICE void scatter_claim_impl(u32* win, const I* ids, u64 n, u64 dst_dim, u64 dst_dim_stride,
                               const KernelLayout& dst_view, const KernelLayout& ids_view, u64* bad) {
    for (u64 e = grid_tid(); e < n; e += grid_threads()) {
        const I v = ids[layout_offset(ids_view, e)];
        const i64 id = resolve_id(v, dst_dim);
        if (id >= 0)
            atomicMax(win + (layout_offset(dst_view, e) - dst_view.start) + (u64)id * dst_dim_stride,
                      (u32)(e + 1));
        else if (id == ID_BAD) report_bad(bad, (i64)v);
    }
}

// Sets, pass 2: the claimed update of each destination writes it.
template <typename R, typename I>
DEVICE void scatter_won_impl(R* dst, const u32* win, const I* ids, const R* src, u64 n, u64 dst_dim,
                             u64 dst_dim_stride, const KernelLayout& dst_view,
                             const KernelLayout& ids_view, const KernelLayout& src_view) {
    for (u64 e = grid_tid(); e < n; e += grid_threads()) {
        const i64 id = resolve_id(ids[layout_offset(ids_view, e)], dst_dim);
        if (id < 0) continue;
        const u64 off = layout_offset(dst_view, e) + (u64)id * dst_dim_stride;
        if (win[off - dst_view.start] == (u32)(e + 1)) dst[off] = src[layout_offset(src_view, e)];
    }
}

#define MOVE_KERNELS(IN, I, W, R)                                                                  \
    KERNEL void gather_##IN##_##W(GATHER_PARAMS(I, R)) {                                           \
        gather_impl(src, ids, out, n, src_dim, dim_stride, src_view, ids_view, bad);                \
    }                                                                                               \
    KERNEL void index_rows_##IN##_##W(INDEX_ROWS_PARAMS(I, R)) {                                   \
        index_rows_impl(src, ids, out, rows, n_ids, right, src_dim, ids_stride, bad);               \
    }                                                                                               \
    KERNEL void gather_last_##IN##_##W(GATHER_LAST_PARAMS(I, R)) {                                 \
        gather_last_impl(src, ids, out, rows, m, src_len, bad);                                     \
    }                                                                                               \
    KERNEL void scatter_own_##IN##_##W(SCATTER_OWN_PARAMS(I, R)) {                                 \
        scatter_own_impl(dst, ids, src, n_cols, len, dst_dim, dst_cols, ids_cols, src_cols,         \
                         dst_dim_stride, ids_dim_stride, src_dim_stride, bad, SetUpd());            \
    }                                                                                               \
    KERNEL void scatter_claim_##IN##_##W(SCATTER_CLAIM_PARAMS(I)) {                                \
        scatter_claim_impl(win, ids, n, dst_dim, dst_dim_stride, dst_view, ids_view, bad);          \
    }                                                                                               \
    KERNEL void scatter_won_##IN##_##W(SCATTER_WON_PARAMS(I, R)) {                                 \
        scatter_won_impl(dst, win, ids, src, n, dst_dim, dst_dim_stride, dst_view, ids_view,        \
                         src_view);                                                                 \
    }

#define ADD_KERNELS(IN, I, NAME, T)                                                                \
    KERNEL void scatter_add_own_##IN##_##NAME(SCATTER_OWN_PARAMS(I, T)) {                          \
        scatter_own_impl(dst, ids, src, n_cols, len, dst_dim, dst_cols, ids_cols, src_cols,         \
                         dst_dim_stride, ids_dim_stride, src_dim_stride, bad, AddUpd());            \
    }                                                                                               \
    KERNEL void scatter_add_atomic_##IN##_##NAME(SCATTER_ADD_ATOMIC_PARAMS(I, T)) {                \
        scatter_add_atomic_impl(dst, ids, src, n, dst_dim, dst_dim_stride, dst_view, ids_view,      \
                                src_view, bad);                                                     \
    }

#define MOVE_FOR_IDS(W, R)                                                                         \
    MOVE_KERNELS(u8, u8, W, R) MOVE_KERNELS(u32, u32, W, R) MOVE_KERNELS(i16, i16, W, R)            \
    MOVE_KERNELS(i32, i32, W, R) MOVE_KERNELS(i64, i64, W, R)
#define ADD_FOR_IDS(NAME, T)                                                                       \
    ADD_KERNELS(u8, u8, NAME, T) ADD_KERNELS(u32, u32, NAME, T) ADD_KERNELS(i16, i16, NAME, T)      \
    ADD_KERNELS(i32, i32, NAME, T) ADD_KERNELS(i64, i64, NAME, T)

CANDLE_ROCM_FOR_EACH_WIDTH(MOVE_FOR_IDS)
CANDLE_ROCM_FOR_EACH_DTYPE(ADD_FOR_IDS)
