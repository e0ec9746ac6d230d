//! The portable gemm's parameter list and entries (gemm.hip): the matmul where no vendor BLAS
//! loads, or where `CANDLE_ROCM_GEMM=portable` asks for it.

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// Strided-batched gemm in BLAS's column-major terms: `gemm_<dtype>` writes the inputs' dtype,
/// `gemm_f32out_<dtype>` (f16, bf16) the f32 accumulators.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "gemm",
    source: include_str!("gemm.hip"),
    groups: &[
        EntryGroup {
            ops: &["gemm"],
            dtypes: &GEMM_DTYPES,
        },
        EntryGroup {
            ops: &["gemm_f32out"],
            dtypes: &["bf16", "f16"],
        },
    ],
    params: &[GemmParams::DECL],
};

/// The dtypes the gemm multiplies (Candle's matmul dtypes on a GPU).
pub const GEMM_DTYPES: [&str; 4] = ["bf16", "f16", "f32", "f64"];

crate::kernel_params! {
    /// C (m x n, column-major, `ldc`) = op(A) op(B) for `batch` matrices `stride_*` elements
    /// apart; op transposes where `trans_*` is 1.
    pub struct GemmParams = "GEMM_PARAMS(T, O)" {
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        c: DevicePtr = "O*",
        m: u64,
        n: u64,
        k: u64,
        lda: u64,
        ldb: u64,
        ldc: u64,
        stride_a: u64,
        stride_b: u64,
        stride_c: u64,
        batch: u64,
        trans_a: u32,
        trans_b: u32,
    }
}

pub const GEMM: Entry<GemmParams> = Entry::new(&MODULE, "gemm");
pub const GEMM_F32OUT: Entry<GemmParams> = Entry::new(&MODULE, "gemm_f32out");
/// Rows and columns of C one block computes (gemm.hip's `GEMM_TILE_M` / `_N`).
pub const TILE_M: u64 = 64;
pub const TILE_N: u64 = 64;
/// Threads of a block (gemm.hip's `GEMM_THREADS`).
pub const THREADS: u32 = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tile_constants_are_gemm_hips() {
        assert_eq!(MODULE.define("GEMM_TILE_M"), Some(TILE_M));
        assert_eq!(MODULE.define("GEMM_TILE_N"), Some(TILE_N));
        assert_eq!(MODULE.define("GEMM_THREADS"), Some(u64::from(THREADS)));
    }
}
