//! The quantized module's parameter lists and entries (quantized.hip). Weights are `w` (or the
//! table `t`) in the device layout with `total` blocks; `O` / `X` is the float type of the
//! output or activations. Families are `<prefix>_<float dtype>`, keyed by the GGML type.

use crate::{DevicePtr, Entry, EntryGroup, Family, KernelModule, KernelParams, HEADERS};

/// GGUF block types, named as the keys of the quantized kernels (Candle's `GgmlDType`).
pub const GGML_TYPES: [&str; 15] = [
    "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2k", "q3k", "q4k",
    "q5k", "q6k", "q8k",
];

/// The GGUF types stored as plain floats (no blocks).
pub const GGML_FLOAT_TYPES: [&str; 3] = ["f32", "f16", "bf16"];

/// The GGUF block types: quantized values with per-block scales.
pub const GGML_BLOCK_TYPES: [&str; 12] = [
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2k", "q3k", "q4k", "q5k", "q6k", "q8k",
];

/// GGUF blocks (in the device layout, see quantized.hip): dequantize to f32 / f16 / bf16 and
/// embedding rows for every type; the float mat-vec, the q8 activations and their fused
/// producers (an rms norm with the residual add, silu(g) * u) keyed by the float types; the
/// integer mat-vec (on q8 activations, or quantizing them itself into shared memory:
/// `matvec_q8f`) and the mixture of experts on q8 activations for the block types.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "quantized",
    source: include_str!("quantized.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "dequantize_f32",
                "dequantize_f16",
                "dequantize_bf16",
                "embedding_f32",
                "embedding_f16",
                "embedding_bf16",
            ],
            dtypes: &GGML_TYPES,
        },
        EntryGroup {
            ops: &[
                "matvec_f32",
                "matvec_f16",
                "matvec_bf16",
                "quantize_q8",
                "rms_norm_q8",
                "swiglu_q8",
                "moe_topk",
                "moe_router_topk",
                "mmq_reduce",
            ],
            dtypes: &GGML_FLOAT_TYPES,
        },
        EntryGroup {
            ops: &[
                "matvec_q8_f32",
                "matvec_q8_f16",
                "matvec_q8_bf16",
                "matvec_q8f_f32",
                "matvec_q8f_f16",
                "matvec_q8f_bf16",
                "matvec1_q8_f32",
                "matvec1_q8_f16",
                "matvec1_q8_bf16",
                "matvec1_q8f_f32",
                "matvec1_q8f_f16",
                "matvec1_q8f_bf16",
                "moe_q8_f32",
                "moe_q8_f16",
                "moe_q8_bf16",
                "moe_q8_sum_f32",
                "moe_q8_sum_f16",
                "moe_q8_sum_bf16",
                "moe_grouped_q8_f32",
                "moe_grouped_q8_f16",
                "moe_grouped_q8_bf16",
                "moe_route",
                "mmq_f32",
                "mmq_f16",
                "mmq_bf16",
                "moe_mmq_f32",
                "moe_mmq_f16",
                "moe_mmq_bf16",
            ],
            dtypes: &GGML_BLOCK_TYPES,
        },
    ],
    params: &[
        DequantizeParams::DECL,
        EmbeddingParams::DECL,
        MatvecParams::DECL,
        QuantizeQ8Params::DECL,
        RmsNormQ8Params::DECL,
        SwigluQ8Params::DECL,
        MatvecQ8Params::DECL,
        MatvecQ8fParams::DECL,
        MoeQ8Params::DECL,
        MoeQ8SumParams::DECL,
        MoeTopkParams::DECL,
        MoeRouterTopkParams::DECL,
        MoeGroupedQ8Params::DECL,
        MoeRouteParams::DECL,
        MmqParams::DECL,
        MmqReduceParams::DECL,
    ],
};

crate::kernel_params! {
    /// `n` values from block `first` on.
    pub struct DequantizeParams = "DEQUANTIZE_PARAMS(O)" {
        w: DevicePtr = "const u8*",
        total: u64,
        first: u64,
        out: DevicePtr = "O*",
        n: u64,
    }
}

crate::kernel_params! {
    /// The rows `ids` of a (rows, k) table; `bad` (or null) counts ids past it.
    pub struct EmbeddingParams = "EMBEDDING_PARAMS(O)" {
        t: DevicePtr = "const u8*",
        total: u64,
        ids: DevicePtr = "const u32*",
        out: DevicePtr = "O*",
        n_ids: u64,
        rows: u64,
        k: u64,
        bad: Option<DevicePtr> = "u32*",
    }
}

crate::kernel_params! {
    /// The float weights' mat-vec: y (rows, n) = x (rows, k) . w^T.
    pub struct MatvecParams = "MATVEC_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        x: DevicePtr = "const X*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        rows: u32,
    }
}

crate::kernel_params! {
    /// (m, k) activations to q8 blocks of `scheme` (`Q8Scheme::code`).
    pub struct QuantizeQ8Params = "QUANTIZE_Q8_PARAMS(X)" {
        x: DevicePtr = "const X*",
        out: DevicePtr = "u8*",
        m: u64,
        k: u64,
        scheme: u32,
    }
}

crate::kernel_params! {
    /// rms norm of x (+ r, written to `sum`, where `has_residual`) straight to q8, and in
    /// x's dtype to `normed` where `has_normed`.
    pub struct RmsNormQ8Params = "RMS_NORM_Q8_PARAMS(X)" {
        x: DevicePtr = "const X*",
        r: DevicePtr = "const X*",
        sum: DevicePtr = "X*",
        alpha: DevicePtr = "const X*",
        out: DevicePtr = "u8*",
        normed: DevicePtr = "X*",
        m: u64,
        k: u64,
        eps: f32,
        scheme: u32,
        has_residual: u32,
        has_normed: u32,
    }
}

crate::kernel_params! {
    /// silu(g) * u of rows [g | u] of 2w values, straight to q8.
    pub struct SwigluQ8Params = "SWIGLU_Q8_PARAMS(X)" {
        gate_up: DevicePtr = "const X*",
        out: DevicePtr = "u8*",
        m: u64,
        w: u64,
        scheme: u32,
    }
}

crate::kernel_params! {
    /// The integer mat-vec on q8 activations `xq`, `wpr` warps a weight row.
    pub struct MatvecQ8Params = "MATVEC_Q8_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        xq: DevicePtr = "const u8*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        rows: u32,
        wpr: u32,
    }
}

crate::kernel_params! {
    /// The integer mat-vec quantizing float activations `x` itself.
    pub struct MatvecQ8fParams = "MATVEC_Q8F_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        x: DevicePtr = "const X*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        rows: u32,
        wpr: u32,
    }
}

crate::kernel_params! {
    /// Experts' mat-vecs, a block per (token, slot) pair picked by `ids`.
    pub struct MoeQ8Params = "MOE_Q8_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        xq: DevicePtr = "const u8*",
        ids: DevicePtr = "const u32*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        experts: u64,
        top: u64,
        x_slots: u64,
        pairs: u64,
        bad: Option<DevicePtr> = "u32*",
    }
}

crate::kernel_params! {
    /// Each token's weighted sum over its experts' mat-vecs (`topw`: f32 (tokens, top)).
    pub struct MoeQ8SumParams = "MOE_Q8_SUM_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        xq: DevicePtr = "const u8*",
        ids: DevicePtr = "const u32*",
        topw: DevicePtr = "const float*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        experts: u64,
        top: u64,
        x_slots: u64,
        tokens: u64,
        bad: Option<DevicePtr> = "u32*",
    }
}

crate::kernel_params! {
    /// A router's softmax, top-k and renormalization: u32 ids and f32 weights (tokens, top).
    pub struct MoeTopkParams = "MOE_TOPK_PARAMS(X)" {
        logits: DevicePtr = "const X*",
        ids: DevicePtr = "u32*",
        weights: DevicePtr = "float*",
        tokens: u64,
        experts: u64,
        top: u32,
        renorm: u32,
    }
}

crate::kernel_params! {
    /// A decode step's router product h . w^T (h `(tokens, hidden)`, w `(experts, hidden)`, both
    /// X) into `logits` (f32 scratch, `(tokens, experts)`) and each token's choice as
    /// `moe_topk` makes it; `tickets` (one zeroed counter) finds the last block.
    pub struct MoeRouterTopkParams = "MOE_ROUTER_TOPK_PARAMS(X)" {
        h: DevicePtr = "const X*",
        w: DevicePtr = "const X*",
        logits: DevicePtr = "float*",
        tickets: DevicePtr = "u32*",
        ids: DevicePtr = "u32*",
        weights: DevicePtr = "float*",
        tokens: u64,
        experts: u64,
        hidden: u64,
        top: u32,
        renorm: u32,
    }
}

crate::kernel_params! {
    /// Experts' mat-vecs over the pairs grouped by expert (`route`, from `moe_route`).
    pub struct MoeGroupedQ8Params = "MOE_GROUPED_Q8_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        xq: DevicePtr = "const u8*",
        route: DevicePtr = "const u32*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        experts: u64,
        top: u64,
        x_slots: u64,
        pairs: u64,
        bad: Option<DevicePtr> = "u32*",
    }
}

crate::kernel_params! {
    /// The pairs sorted by expert, with where each expert's pairs and chunks start.
    pub struct MoeRouteParams = "MOE_ROUTE_PARAMS()" {
        ids: DevicePtr = "const u32*",
        route: DevicePtr = "u32*",
        pairs: u64,
        experts: u64,
        /// Pairs a chunk (the product's block of pairs).
        chunk: u32,
    }
}

crate::kernel_params! {
    /// `x . w^T` on the int8 matrix units for `m` rows of q8 activations `xq` (of the weights'
    /// scheme) and `n` weight rows: y is (m, n).
    pub struct MmqParams = "MMQ_PARAMS(X)" {
        w: DevicePtr = "const u8*",
        total: u64,
        xq: DevicePtr = "const u8*",
        y: DevicePtr = "X*",
        n: u64,
        k: u64,
        m: u64,
        /// With a split of k (grid z above 1), the splits' partial sums (z x m x n f32).
        ws: Option<DevicePtr> = "float*",
        /// Sub-blocks of 32 values of k a split (a multiple of MMQ_KSUBS).
        ksplit: u64,
    }
}

crate::kernel_params! {
    /// y (`count` values) = the sum of `splits` f32 partial sums of `count` values each.
    pub struct MmqReduceParams = "MMQ_REDUCE_PARAMS(X)" {
        ws: DevicePtr = "const float*",
        y: DevicePtr = "X*",
        count: u64,
        splits: u32,
    }
}

pub const DEQUANTIZE: Family<DequantizeParams> = Family::new(&MODULE, "dequantize");
pub const EMBEDDING: Family<EmbeddingParams> = Family::new(&MODULE, "embedding");
pub const MATVEC: Family<MatvecParams> = Family::new(&MODULE, "matvec");
pub const MATVEC_Q8: Family<MatvecQ8Params> = Family::new(&MODULE, "matvec_q8");
/// One activation row (no other rows' accumulators).
pub const MATVEC1_Q8: Family<MatvecQ8Params> = Family::new(&MODULE, "matvec1_q8");
pub const MATVEC_Q8F: Family<MatvecQ8fParams> = Family::new(&MODULE, "matvec_q8f");
pub const MATVEC1_Q8F: Family<MatvecQ8fParams> = Family::new(&MODULE, "matvec1_q8f");
pub const MOE_Q8: Family<MoeQ8Params> = Family::new(&MODULE, "moe_q8");
/// Each token's weighted sum over its experts (a decode step's down projection).
pub const MOE_Q8_SUM: Family<MoeQ8SumParams> = Family::new(&MODULE, "moe_q8_sum");
pub const MOE_GROUPED_Q8: Family<MoeGroupedQ8Params> = Family::new(&MODULE, "moe_grouped_q8");
/// `mmq_<x dtype>`, keyed by the weights' type.
pub const MMQ: Family<MmqParams> = Family::new(&MODULE, "mmq");
/// The grouped mixture of experts on the int8 matrix units (its route in chunks of MMQ_BN).
pub const MOE_MMQ: Family<MoeGroupedQ8Params> = Family::new(&MODULE, "moe_mmq");
/// Keyed by the activations' float type.
pub const QUANTIZE_Q8: Entry<QuantizeQ8Params> = Entry::new(&MODULE, "quantize_q8");
/// Keyed by the activations' float type.
pub const RMS_NORM_Q8: Entry<RmsNormQ8Params> = Entry::new(&MODULE, "rms_norm_q8");
/// Keyed by the activations' float type.
pub const SWIGLU_Q8: Entry<SwigluQ8Params> = Entry::new(&MODULE, "swiglu_q8");
/// Keyed by the output's float type.
pub const MMQ_REDUCE: Entry<MmqReduceParams> = Entry::new(&MODULE, "mmq_reduce");
/// Keyed by the logits' float type.
pub const MOE_TOPK: Entry<MoeTopkParams> = Entry::new(&MODULE, "moe_topk");
/// Keyed by the activations' float type.
pub const MOE_ROUTER_TOPK: Entry<MoeRouterTopkParams> = Entry::new(&MODULE, "moe_router_topk");
/// Keyed by the weights' block type.
pub const MOE_ROUTE: Entry<MoeRouteParams> = Entry::new(&MODULE, "moe_route");
