// matrix.hip: probes of compat.h's matrix units, for the GPU tests (no op launches them).
//
// mma_registers_<dtype>: one warp runs one instruction (MMA_PROBE_*) on registers given lane
// by lane (a, b and c hold MMA_PROBE_REGS values a lane, lane-major), writes the result
// registers to d and whether the instruction exists on this target to ran[0]. The test fills
// the registers from its own model of the instruction's layout: a layout fault here (or in the
// emulation) shows as a wrong product.
//
// mma_tile_<dtype>: one warp runs compat.h's tile operations on 16x16 row-major a, b and f32 c:
// d[0] = a b + c with b loaded as rows of k, d[1] the same with b given transposed (rows of n),
// d[2] = round(a b) b + c with round(a b) made the next a operand by mma_c_to_a; each as
// 16x16 f32.
//
// mma_int_registers_i8 / mma_int_tile_i8: the same for the int8 units (compat.h's
// mma_i8_16x16x32): a and b i8 (MMA_PROBE_I8_REGS a lane for the registers), c and d i32; the
// tile probe takes a 16x32 a and a 32x16 b, row-major, and writes d = a b + c through the
// shared-memory loads the quantized products use (b held as rows of n).

#define MMA_PROBE_REGS 16
#define MMA_PROBE_M16N8K16 0
#define MMA_PROBE_MFMA_16X16X16 1
#define MMA_PROBE_MFMA_32X32X8 2
#define MMA_PROBE_WMMA_16X16X16 3
#define MMA_PROBE_I8_REGS 32
#define MMA_PROBE_M16N8K32_S8 4
#define MMA_PROBE_MFMA_I32_16X16X32_I8 5
#define MMA_PROBE_MFMA_I32_16X16X16_I8 6
#define MMA_PROBE_WMMA_I32_16X16X16_IU8 7

template <typename T>
DEVICE void mma_registers(u32 instruction, const T* a, const T* b, const float* c, float* d, u32* ran) {
    const u32 lane = mma_lane();
    u32 aw[MMA_PROBE_REGS / 2], bw[MMA_PROBE_REGS / 2];
    float cr[MMA_PROBE_REGS];
    for (u32 i = 0; i < MMA_PROBE_REGS / 2; ++i) {
        const u32 at = lane * MMA_PROBE_REGS + 2 * i;
        aw[i] = mma_word(a[at].bits, a[at + 1].bits);
        bw[i] = mma_word(b[at].bits, b[at + 1].bits);
    }
    for (u32 i = 0; i < MMA_PROBE_REGS; ++i) cr[i] = c[lane * MMA_PROBE_REGS + i];
    u32 done = 0;
#if defined(CANDLE_ROCM_MMA_SYNC)
    if (instruction == MMA_PROBE_M16N8K16) { mma_m16n8k16<T>(aw, bw, cr); done = 1; }
#endif
#if defined(CANDLE_ROCM_MMA_MFMA)
    if (instruction == MMA_PROBE_MFMA_16X16X16) { mfma_16x16x16<T>(aw, bw, cr); done = 1; }
    if (instruction == MMA_PROBE_MFMA_32X32X8) { mfma_32x32x8<T>(aw, bw, cr); done = 1; }
#endif
#if defined(CANDLE_ROCM_MMA_WMMA11) || defined(CANDLE_ROCM_MMA_WMMA12)
    if (instruction == MMA_PROBE_WMMA_16X16X16) { wmma_16x16x16<T>(aw, bw, cr); done = 1; }
#endif
    for (u32 i = 0; i < MMA_PROBE_REGS; ++i) d[lane * MMA_PROBE_REGS + i] = cr[i];
    if (lane == 0) ran[0] = done;
}

template <typename T>
DEVICE void mma_tile(const T* a, const T* b, const float* c, float* d) {
    const u32 ld = MMA_SCRATCH_LD;
    // 16-byte aligned tiles (ldmatrix's rows)
    __shared__ Raw16 raw[4][16 * MMA_SCRATCH_LD / 8];
    T* sa = (T*)raw[0];
    T* sb = (T*)raw[1];
    T* sbt = (T*)raw[2];
    T* scratch = (T*)raw[3];
    for (u32 i = mma_lane(); i < 256; i += warpSize) {
        const u32 r = i / 16, col = i % 16;
        sa[r * ld + col] = a[i];
        sb[r * ld + col] = b[i];
        sbt[col * ld + r] = b[i];
    }
    __syncthreads();
    u32 fa[MMA_A / 2], fb[MMA_B / 2], pa[MMA_A / 2];
    float acc[3][MMA_C], p[MMA_C];
    mma_load_a(fa, sa, ld);
    for (u32 e = 0; e < MMA_C; ++e) {
        u32 row, col;
        mma_c_at(e, row, col);
        acc[0][e] = acc[1][e] = acc[2][e] = c[row * 16 + col];
        p[e] = 0.0f;
    }
    mma_load_b_kn(fb, sb, ld);
    mma_16x16x16<T>(fa, fb, acc[0]);
    mma_16x16x16<T>(fa, fb, p);
    mma_c_to_a(p, pa, scratch);
    mma_16x16x16<T>(pa, fb, acc[2]);
    mma_load_b_nk(fb, sbt, ld);
    mma_16x16x16<T>(fa, fb, acc[1]);
    for (u32 t = 0; t < 3; ++t)
        for (u32 e = 0; e < MMA_C; ++e) {
            u32 row, col;
            mma_c_at(e, row, col);
            d[t * 256 + row * 16 + col] = acc[t][e];
        }
}

DEVICE void mma_int_registers(u32 instruction, const i8* a, const i8* b, const int* c, int* d, u32* ran) {
    const u32 lane = mma_lane();
    u32 aw[MMA_PROBE_I8_REGS / 4], bw[MMA_PROBE_I8_REGS / 4];
    int cr[MMA_PROBE_REGS];
    for (u32 i = 0; i < MMA_PROBE_I8_REGS / 4; ++i) {
        aw[i] = *(const u32*)(a + lane * MMA_PROBE_I8_REGS + 4 * i);
        bw[i] = *(const u32*)(b + lane * MMA_PROBE_I8_REGS + 4 * i);
    }
    for (u32 i = 0; i < MMA_PROBE_REGS; ++i) cr[i] = c[lane * MMA_PROBE_REGS + i];
    u32 done = 0;
#if defined(CANDLE_ROCM_MMA_SYNC)
    if (instruction == MMA_PROBE_M16N8K32_S8) { mma_m16n8k32_s8(aw, bw, cr); done = 1; }
#endif
#if defined(CANDLE_ROCM_MMA_MFMA) && defined(CANDLE_ROCM_AMD)
    const u32 mine = MFMA_I8_WORDS == 1 ? MMA_PROBE_MFMA_I32_16X16X16_I8 : MMA_PROBE_MFMA_I32_16X16X32_I8;
    if (instruction == mine) { mfma_i8_instruction(aw, bw, cr); done = 1; }
#elif defined(CANDLE_ROCM_MMA_MFMA)
    if (instruction == MMA_PROBE_MFMA_I32_16X16X32_I8) { mfma_i32_16x16x32_i8(aw, bw, cr); done = 1; }
#endif
#if defined(CANDLE_ROCM_MMA_WMMA11) || defined(CANDLE_ROCM_MMA_WMMA12)
    if (instruction == MMA_PROBE_WMMA_I32_16X16X16_IU8) {
        cr_i32x8 acc;
        for (int i = 0; i < 8; ++i) acc[i] = cr[i];
        acc = wmma_i8(aw, bw, acc);
        for (int i = 0; i < 8; ++i) cr[i] = acc[i];
        done = 1;
    }
#endif
    for (u32 i = 0; i < MMA_PROBE_REGS; ++i) d[lane * MMA_PROBE_REGS + i] = cr[i];
    if (lane == 0) ran[0] = done;
}

// The row stride of the int8 probe's shared tiles (bytes; a multiple of 4).
#define MMA_PROBE_I8_LD 36
DEVICE void mma_int_tile(const i8* a, const i8* b, const int* c, int* d) {
    __shared__ u32 raw[2][16 * MMA_PROBE_I8_LD / 4];
    i8* sa = (i8*)raw[0];
    i8* sbt = (i8*)raw[1];
    for (u32 i = mma_lane(); i < 512; i += warpSize) {
        const u32 r = i / 32, k = i % 32;
        sa[r * MMA_PROBE_I8_LD + k] = a[i];
        // b(k, n) = b[k * 16 + n], held as rows of n
        sbt[(i % 16) * MMA_PROBE_I8_LD + i / 16] = b[i];
    }
    __syncthreads();
    u32 fa[MMA_I8_A / 4], fb[MMA_I8_B / 4];
    int acc[MMA_C];
    mma_i8_load_a(fa, sa, MMA_PROBE_I8_LD);
    mma_i8_load_b(fb, sbt, MMA_PROBE_I8_LD);
    for (u32 e = 0; e < MMA_C; ++e) {
        u32 row, col;
        mma_c_at(e, row, col);
        acc[e] = c[row * 16 + col];
    }
    mma_i8_16x16x32(fa, fb, acc);
    for (u32 e = 0; e < MMA_C; ++e) {
        u32 row, col;
        mma_c_at(e, row, col);
        d[row * 16 + col] = acc[e];
    }
}

// MMA_REGISTERS_PARAMS, MMA_TILE_PARAMS: the lists declared in rocm-kernels (`matrix::*`).
#define MATRIX_ENTRIES(NAME, T)                                                                 \
    KERNEL void mma_registers_##NAME(MMA_REGISTERS_PARAMS(T)) {                                 \
        mma_registers<T>(instruction, a, b, c, d, ran);                                         \
    }                                                                                           \
    KERNEL void mma_tile_##NAME(MMA_TILE_PARAMS(T)) { mma_tile<T>(a, b, c, d); }
CANDLE_ROCM_KEEP(bf16)(MATRIX_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(MATRIX_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(i8)(
    KERNEL void mma_int_registers_i8(MMA_INT_REGISTERS_PARAMS(i8)) { mma_int_registers(instruction, a, b, c, d, ran); }
    KERNEL void mma_int_tile_i8(MMA_INT_TILE_PARAMS(i8)) { mma_int_tile(a, b, c, d); })
