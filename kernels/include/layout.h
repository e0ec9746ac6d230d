// layout.h: the strided layout passed by value to kernels (mirrors rocm_device::KernelLayout).
#pragma once

#define CANDLE_ROCM_MAX_DIMS 8

// Element offsets; `fits_u32` says every linear index and offset fits in 32 bits, so the
// decode can use 32-bit division (several times cheaper than 64-bit on both vendors).
struct KernelLayout {
    u32 ndim;
    u32 fits_u32;
    u64 start;
    u64 dims[CANDLE_ROCM_MAX_DIMS];
    u64 strides[CANDLE_ROCM_MAX_DIMS];
};

// Offset of the i-th element (row-major order over dims) of a strided tensor.
DEVICE u64 layout_offset(const KernelLayout& l, u64 i) {
    if (l.fits_u32) {
        u32 rem = (u32)i;
        u32 off = 0;
        for (int d = (int)l.ndim - 1; d >= 0; --d) {
            u32 dim = (u32)l.dims[d];
            off += (rem % dim) * (u32)l.strides[d];
            rem /= dim;
        }
        return l.start + off;
    }
    u64 off = 0;
    for (int d = (int)l.ndim - 1; d >= 0; --d) {
        off += (i % l.dims[d]) * l.strides[d];
        i /= l.dims[d];
    }
    return l.start + off;
}
