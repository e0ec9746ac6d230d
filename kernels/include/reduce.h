// reduce.h: the warp and block combines of every kernel that reduces (reduce, norm, attention,
// quantized). An Op names its State and gives combine(a, b) and shfl(state, lane_mask);
// SumOf and MaxOf are the plain ones. A warp combines by an xor butterfly from width / 2 down,
// so every lane ends with the same value, in an order fixed by the lane count: the same bits on
// every run.
#pragma once

template <typename A> struct SumOf {
    typedef A State;
    DEVICE static A combine(A a, A b) { return a + b; }
    DEVICE static A shfl(A v, int lane_mask) { return warp_shfl_xor(v, lane_mask); }
};
template <typename A> struct MaxOf {
    typedef A State;
    DEVICE static A combine(A a, A b) { return b > a ? b : a; }
    DEVICE static A shfl(A v, int lane_mask) { return warp_shfl_xor(v, lane_mask); }
};

// `v` combined over each aligned group of `width` lanes (a power of two, at most warpSize);
// every lane of a group gets its group's result.
template <typename Op>
DEVICE typename Op::State warp_combine(typename Op::State v, u32 width) {
    for (u32 off = width / 2; off > 0; off /= 2) v = Op::combine(v, Op::shfl(v, off));
    return v;
}
template <typename Op> DEVICE typename Op::State warp_combine(typename Op::State v) {
    return warp_combine<Op>(v, warpSize);
}
template <typename A> DEVICE A warp_sum(A v) { return warp_combine<SumOf<A> >(v); }
template <typename A> DEVICE A warp_max(A v) { return warp_combine<MaxOf<A> >(v); }

// Each warp's combine of `v` stored at partial[warp]; returns the block's warp count.
template <typename Op>
DEVICE u32 warps_into(typename Op::State v, typename Op::State* partial) {
    v = warp_combine<Op>(v);
    if (threadIdx.x % warpSize == 0) partial[threadIdx.x / warpSize] = v;
    __syncthreads();
    return (blockDim.x + warpSize - 1) / warpSize;
}

// One value per thread combined over the block; every thread gets the result. The warps'
// results are folded in warp order by every thread. Every thread of the block must call it.
template <typename Op>
DEVICE typename Op::State block_combine_all(typename Op::State v) {
    __shared__ typename Op::State partial[MAX_BLOCK_WARPS];
    const u32 nwarps = warps_into<Op>(v, partial);
    v = partial[0];
    for (u32 w = 1; w < nwarps; ++w) v = Op::combine(v, partial[w]);
    __syncthreads();
    return v;
}

// One value per thread combined over the block, the warps' results by warp 0's butterfly
// (Op::identity() for the lanes past the block's warps); valid in thread 0 only.
template <typename Op>
DEVICE typename Op::State block_combine_first(typename Op::State v) {
    __shared__ typename Op::State partial[MAX_BLOCK_WARPS];
    const u32 nwarps = warps_into<Op>(v, partial);
    const u32 lane = threadIdx.x % warpSize;
    if (threadIdx.x < warpSize) v = warp_combine<Op>(lane < nwarps ? partial[lane] : Op::identity());
    __syncthreads();
    return v;
}
