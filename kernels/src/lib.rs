//! The kernel sources of candle-rocm, embedded as strings.
//!
//! Each op family is one `.hip` file whose templates are instantiated per dtype as
//! `extern "C"` entry points named `<op>_<dtype>` (dtype names as Candle's `DType::as_str`).
//! The runtime compiles a module with [`prelude`] in front: `compat.h`, the only place where
//! the AMD (hiprtc) and NVIDIA (NVRTC) builds differ, then the shared layout, elementwise-loop
//! and reduction headers.

pub use rocm_device::kernel::{
    layout, params, ArgSink, DevicePtr, Entry, EntryGroup, Family, KernelArg, KernelLayout,
    KernelModule, KernelParams, LayoutError, ParamsDecl, MAX_DIMS,
};
pub use rocm_device::kernel_params;

/// `compat.h`: per-platform types, shuffles, ballots and narrow atomics.
pub const COMPAT_H: &str = include_str!("../include/compat.h");
/// `layout.h`: the by-value strided layout struct and its index decoding.
pub const LAYOUT_H: &str = include_str!("../include/layout.h");
/// `map.h`: grid-stride elementwise loops with 16-byte contiguous paths.
pub const MAP_H: &str = include_str!("../include/map.h");
/// `reduce.h`: the warp and block combines of every kernel that reduces.
pub const REDUCE_H: &str = include_str!("../include/reduce.h");

/// Dtype names as Candle 0.11.1's `DType::as_str`, in the order modules instantiate them.
pub const DTYPES: [&str; 10] = [
    "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "f8e4m3",
];

/// Floating-point dtypes (math ops are defined for these only).
pub const FLOAT_DTYPES: [&str; 5] = ["bf16", "f16", "f32", "f64", "f8e4m3"];
/// Integer dtypes.
pub const INT_DTYPES: [&str; 5] = ["u8", "u32", "i16", "i32", "i64"];
/// Dtypes a `where_cond` condition may have (Candle's CPU backend accepts these).
pub const CONDITION_DTYPES: [&str; 5] = ["u8", "u32", "i16", "i32", "i64"];

/// The headers every module is compiled with, `(file name, text)`, in order.
pub const HEADERS: &[(&str, &str)] = &[
    ("compat.h", COMPAT_H),
    ("layout.h", LAYOUT_H),
    ("map.h", MAP_H),
    ("reduce.h", REDUCE_H),
];

/// [`HEADERS`] as one text, each under its own `#line` name: what every module's source
/// follows (for sources compiled outside the table, such as tests' own kernels).
pub fn prelude() -> String {
    rocm_device::kernel::prelude_of(HEADERS)
}

/// fill, iota, copies (contiguous, strided, 2-D, tiled transpose) and strided constant set.
pub const FILL: KernelModule = KernelModule {
    headers: HEADERS,
    name: "fill",
    source: include_str!("fill.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "fill",
                "iota",
                "copy",
                "copy_strided",
                "const_set",
                "transpose",
                "transpose_pairs",
            ],
            dtypes: &DTYPES,
        },
        EntryGroup {
            ops: &["copy2d"],
            dtypes: &WIDTHS,
        },
    ],
    params: &[
        fill::CopyStridedParams::DECL,
        fill::ConstSetParams::DECL,
        fill::TransposeParams::DECL,
        fill::Copy2dParams::DECL,
    ],
};

/// The fill module's parameter lists and entries (fill.hip) that the runtime and the op crates
/// launch (the rest are launched by the runtime's tests through the untyped path).
pub mod fill {
    use crate::params::{ArgSink, KernelArg};
    use crate::{DevicePtr, Entry, KernelLayout};

    /// Most blocks one `copy2d` launch copies: fill.hip's `COPY2D_MAX_BLOCKS` (a test holds
    /// the two equal).
    pub const COPY2D_MAX_BLOCKS: usize = 8;

    /// fill.hip's `Copy2dBlocks`: per block, the source address (of its first element), its
    /// width and source stride and its first column in the destination, all in copy units.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    pub struct Copy2dBlocks {
        pub src: [u64; COPY2D_MAX_BLOCKS],
        pub cols: [u64; COPY2D_MAX_BLOCKS],
        pub src_stride: [u64; COPY2D_MAX_BLOCKS],
        pub dst_col: [u64; COPY2D_MAX_BLOCKS],
    }

    impl KernelArg for Copy2dBlocks {
        const C_TYPE: &'static str = "Copy2dBlocks";
        fn push_to<S: ArgSink>(&self, sink: &mut S) {
            sink.scalar(*self);
        }
    }

    crate::kernel_params! {
        /// dst[i] = src at i of `src_layout`, over `n` elements.
        pub struct CopyStridedParams = "COPY_STRIDED_PARAMS(T)" {
            src: DevicePtr = "const T*",
            dst: DevicePtr = "T*",
            n: u64,
            src_layout: KernelLayout,
        }
    }

    crate::kernel_params! {
        /// Every element of `l` in `dst` set to `value` (its bits in the low bytes of the
        /// word, read as T).
        pub struct ConstSetParams = "CONST_SET_PARAMS(T)" {
            dst: DevicePtr = "T*",
            value: u64 = "T",
            n: u64,
            l: KernelLayout,
        }
    }

    crate::kernel_params! {
        /// A tiled transpose of `batch` (d0, d1) views with unit stride on d0 into contiguous
        /// (d0, d1) blocks.
        pub struct TransposeParams = "TRANSPOSE_PARAMS(T)" {
            src: DevicePtr = "const T*",
            dst: DevicePtr = "T*",
            batch: u64,
            d0: u64,
            d1: u64,
            s_batch: u64,
            s1: u64,
            start: u64,
        }
    }

    crate::kernel_params! {
        /// Up to [`COPY2D_MAX_BLOCKS`] 2-D blocks of `rows` rows into `dst`.
        pub struct Copy2dParams = "COPY2D_PARAMS(R)" {
            dst: DevicePtr = "R*",
            rows: u64,
            dst_stride: u64,
            blocks: Copy2dBlocks,
        }
    }

    pub const COPY_STRIDED: Entry<CopyStridedParams> = Entry::new(&super::FILL, "copy_strided");
    pub const CONST_SET: Entry<ConstSetParams> = Entry::new(&super::FILL, "const_set");
    pub const TRANSPOSE: Entry<TransposeParams> = Entry::new(&super::FILL, "transpose");
    /// Two elements a thread (small dtypes, even sizes).
    pub const TRANSPOSE_PAIRS: Entry<TransposeParams> = Entry::new(&super::FILL, "transpose_pairs");
    /// Keyed by the copy unit's width.
    pub const COPY2D: Entry<Copy2dParams> = Entry::new(&super::FILL, "copy2d");

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_copy2d_block_limit_is_fill_hips() {
            assert_eq!(
                super::super::FILL.define("COPY2D_MAX_BLOCKS"),
                Some(super::COPY2D_MAX_BLOCKS as u64)
            );
        }
    }
}

/// Math ops that only floats have.
pub const UNARY_FLOAT_OPS: [&str; 23] = [
    "neg", "recip", "exp", "log", "sin", "cos", "tanh", "erf", "ceil", "floor", "round", "normcdf",
    "abs", "sqr", "sqrt", "gelu", "gelu_erf", "relu", "silu", "sign", "sigmoid", "elu", "powf",
];
/// Unary ops Candle's CPU backend also computes for integers.
pub const UNARY_INT_OPS: [&str; 10] = [
    "abs", "ceil", "floor", "round", "relu", "sign", "gelu", "gelu_erf", "erf", "silu",
];

/// Unary math, elu, powf and affine.
pub const UNARY: KernelModule = KernelModule {
    headers: HEADERS,
    name: "unary",
    source: include_str!("unary.hip"),
    groups: &[
        EntryGroup {
            ops: &UNARY_FLOAT_OPS,
            dtypes: &FLOAT_DTYPES,
        },
        EntryGroup {
            ops: &UNARY_INT_OPS,
            dtypes: &INT_DTYPES,
        },
        EntryGroup {
            ops: &["affine"],
            dtypes: &DTYPES,
        },
    ],
    params: &[unary::Params::DECL, unary::AffineParams::DECL],
};

/// The parameters of the unary module's entries (unary.hip).
pub mod unary {
    use crate::{DevicePtr, Entry, KernelLayout};

    crate::kernel_params! {
        /// `<op>_<dtype>`: out[i] = op(input at i of `l`) over `n` elements, written
        /// contiguously; `p` is the op's parameter (elu's alpha, powf's exponent; 0 for the
        /// others).
        pub struct Params = "UNARY_PARAMS(T)" {
            input: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            l: KernelLayout,
            p: f64,
        }
    }

    crate::kernel_params! {
        /// `affine_<dtype>`: out[i] = input[i] * mul + add (both rounded to the dtype first).
        pub struct AffineParams = "AFFINE_PARAMS(T)" {
            input: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            l: KernelLayout,
            mul: f64,
            add: f64,
        }
    }

    /// `x * mul + add`.
    pub const AFFINE: Entry<AffineParams> = Entry::new(&super::UNARY, "affine");
}

/// Binary arithmetic and comparisons (comparisons write u8); `silu_mul` (silu(a) * b) for
/// floats.
pub const BINARY: KernelModule = KernelModule {
    headers: HEADERS,
    name: "binary",
    source: include_str!("binary.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
                "ge",
            ],
            dtypes: &DTYPES,
        },
        EntryGroup {
            ops: &["silu_mul"],
            dtypes: &FLOAT_DTYPES,
        },
    ],
    params: &[binary::Params::DECL, binary::CmpParams::DECL],
};

/// The parameters of the binary module's entries (binary.hip).
pub mod binary {
    use crate::{DevicePtr, KernelLayout};

    crate::kernel_params! {
        /// `<op>_<dtype>` (arithmetic, `silu_mul`): out[i] = a[i] op b[i] over `n` elements
        /// of two layouts of the same dims, written contiguously.
        pub struct Params = "BINARY_PARAMS(T)" {
            a: DevicePtr = "const T*",
            b: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            la: KernelLayout,
            lb: KernelLayout,
        }
    }

    crate::kernel_params! {
        /// `<cmp>_<dtype>`: as [`Params`], the result 1 or 0 as u8.
        pub struct CmpParams = "CMP_PARAMS(T)" {
            a: DevicePtr = "const T*",
            b: DevicePtr = "const T*",
            out: DevicePtr = "u8*",
            n: u64,
            la: KernelLayout,
            lb: KernelLayout,
        }
    }
}

/// Casts between every pair of dtypes: `cast_<from>_<to>`, op `cast_<from>`, key `<to>`.
pub const CAST: KernelModule = KernelModule {
    headers: HEADERS,
    name: "cast",
    source: include_str!("cast.hip"),
    groups: &[EntryGroup {
        ops: &[
            "cast_u8",
            "cast_u32",
            "cast_i16",
            "cast_i32",
            "cast_i64",
            "cast_bf16",
            "cast_f16",
            "cast_f32",
            "cast_f64",
            "cast_f8e4m3",
        ],
        dtypes: &DTYPES,
    }],
    params: &[cast::Params::DECL],
};

/// The parameters of the cast module's entries (cast.hip).
pub mod cast {
    use crate::{DevicePtr, Family, KernelLayout};

    crate::kernel_params! {
        /// `cast_<from>_<to>`: out[i] = input at i of `l`, converted, over `n` elements.
        pub struct Params = "CAST_PARAMS(ST, DT)" {
            input: DevicePtr = "const ST*",
            out: DevicePtr = "DT*",
            n: u64,
            l: KernelLayout,
        }
    }

    /// `cast_<from>`, keyed by the destination dtype.
    pub const CAST: Family<Params> = Family::new(&super::CAST, "cast");
}

/// `where_<condition dtype>_<value dtype>`.
pub const TERNARY: KernelModule = KernelModule {
    headers: HEADERS,
    name: "ternary",
    source: include_str!("ternary.hip"),
    groups: &[EntryGroup {
        ops: &[
            "where_u8",
            "where_u32",
            "where_i16",
            "where_i32",
            "where_i64",
        ],
        dtypes: &DTYPES,
    }],
    params: &[ternary::WhereParams::DECL],
};

/// The parameters of `where` (ternary.hip).
pub mod ternary {
    use crate::{DevicePtr, Family, KernelLayout};

    crate::kernel_params! {
        /// `where_<cond dtype>_<dtype>`'s parameters: out[i] = cond[i] != 0 ? t[i] : f[i] over
        /// `n` elements of three layouts.
        pub struct WhereParams = "WHERE_PARAMS(CT, T)" {
            cond: DevicePtr = "const CT*",
            t: DevicePtr = "const T*",
            f: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            lc: KernelLayout,
            lt: KernelLayout,
            lf: KernelLayout,
        }
    }

    /// `where_<condition dtype>`, keyed by the values' dtype.
    pub const WHERE: Family<WhereParams> = Family::new(&super::TERNARY, "where");
}

/// Rotary embeddings (candle-nn's rope_i, rope, rope_thd).
pub const ROPE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "rope",
    source: include_str!("rope.hip"),
    groups: &[EntryGroup {
        ops: &["rope_i", "rope", "rope_thd"],
        dtypes: &["bf16", "f16", "f32", "f64"],
    }],
    params: &[rope::Params::DECL],
};

/// The rotary embeddings' entries and parameters (rope.hip).
pub mod rope {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// The parameters of every rotary embedding: x, the cos/sin tables and the output
        /// (contiguous), the tensor's first three dims (b, h, t; b, t, h for `rope_thd`),
        /// the head dim and the tables' batch stride (0: one table for the batch).
        pub struct Params = "ROPE_PARAMS(T)" {
            x: DevicePtr = "const T*",
            cos: DevicePtr = "const T*",
            sin: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            d0: u64,
            d1: u64,
            d2: u64,
            d: u64,
            cs_batch_stride: u64,
        }
    }

    /// Pairs interleaved (candle-nn's `rope_i`).
    pub const ROPE_I: Entry<Params> = Entry::new(&super::ROPE, "rope_i");
    /// Pairs across the halves of a head (candle-nn's `rope`).
    pub const ROPE: Entry<Params> = Entry::new(&super::ROPE, "rope");
    /// Halves, (b, t, h, d) layout (candle-nn's `rope_thd`).
    pub const ROPE_THD: Entry<Params> = Entry::new(&super::ROPE, "rope_thd");
}

/// Reductions over any dims: `<op>_<dtype>`, the second pass `<op>_finish_<dtype>`, and a
/// thread an output `<op>_columns_<dtype>`.
pub const REDUCE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "reduce",
    source: include_str!("reduce.hip"),
    groups: &[EntryGroup {
        ops: &[
            "sum",
            "min",
            "max",
            "argmin",
            "argmax",
            "sum_finish",
            "min_finish",
            "max_finish",
            "argmin_finish",
            "argmax_finish",
            "sum_columns",
            "min_columns",
            "max_columns",
            "argmin_columns",
            "argmax_columns",
        ],
        dtypes: &DTYPES,
    }],
    params: &[
        reduce::ReduceParams::DECL,
        reduce::FinishParams::DECL,
        reduce::ColumnsParams::DECL,
    ],
};

/// The reductions' entries and parameter lists (reduce.hip), each table in the order sum,
/// min, max, argmin, argmax.
pub mod reduce {
    use crate::{DevicePtr, Entry, KernelLayout};

    crate::kernel_params! {
        /// The first pass: `n_out` outputs (their elements at `kept`), each reducing `red_len`
        /// elements (at `red`) in chunks of `chunk_len` (a grid row a chunk); with more than
        /// one chunk each writes its partial state to `partials` for the second pass.
        pub struct ReduceParams = "REDUCE_PARAMS(T, OUT)" {
            input: DevicePtr = "const T*",
            out: DevicePtr = "OUT*",
            partials: DevicePtr = "void*",
            n_out: u64,
            red_len: u64,
            kept: KernelLayout,
            red: KernelLayout,
            chunk_len: u64,
        }
    }

    crate::kernel_params! {
        /// The second pass: each output's `chunks` partial states combined.
        pub struct FinishParams = "FINISH_PARAMS(OUT)" {
            partials: DevicePtr = "const void*",
            out: DevicePtr = "OUT*",
            n_out: u64,
            chunks: u64,
        }
    }

    crate::kernel_params! {
        /// A thread an output: `n_out` outputs at `kept`, `red_len` elements each at `red`.
        pub struct ColumnsParams = "COLUMNS_PARAMS(T, OUT)" {
            input: DevicePtr = "const T*",
            out: DevicePtr = "OUT*",
            n_out: u64,
            red_len: u64,
            kept: KernelLayout,
            red: KernelLayout,
        }
    }

    pub const FIRST_PASS: [Entry<ReduceParams>; 5] = [
        Entry::new(&super::REDUCE, "sum"),
        Entry::new(&super::REDUCE, "min"),
        Entry::new(&super::REDUCE, "max"),
        Entry::new(&super::REDUCE, "argmin"),
        Entry::new(&super::REDUCE, "argmax"),
    ];
    pub const FINISH: [Entry<FinishParams>; 5] = [
        Entry::new(&super::REDUCE, "sum_finish"),
        Entry::new(&super::REDUCE, "min_finish"),
        Entry::new(&super::REDUCE, "max_finish"),
        Entry::new(&super::REDUCE, "argmin_finish"),
        Entry::new(&super::REDUCE, "argmax_finish"),
    ];
    pub const COLUMNS: [Entry<ColumnsParams>; 5] = [
        Entry::new(&super::REDUCE, "sum_columns"),
        Entry::new(&super::REDUCE, "min_columns"),
        Entry::new(&super::REDUCE, "max_columns"),
        Entry::new(&super::REDUCE, "argmin_columns"),
        Entry::new(&super::REDUCE, "argmax_columns"),
    ];
}

/// softmax / log-softmax over the last dim, rms_norm, add_rms_norm, layer_norm: one block per row
/// (`<op>_<dtype>`), or rows held in registers as 16-byte packs (`<op>_regpack_<dtype>`) or
/// elements (`<op>_regelem_<dtype>`); every entry takes [`norm::RowParams`].
pub const NORM: KernelModule = KernelModule {
    headers: HEADERS,
    name: "norm",
    source: include_str!("norm.hip"),
    groups: &[EntryGroup {
        ops: &norm::ROW_KERNELS,
        dtypes: &["bf16", "f16", "f32", "f64"],
    }],
    params: &[norm::RowParams::DECL],
};

/// The row kernels' entries and their one parameter list (norm.hip).
pub mod norm {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// Every row kernel's parameters, over `rows` contiguous rows of `len`: softmax and
        /// log_softmax read x and write out; rms_norm also reads alpha (and eps);
        /// add_rms_norm norms x + r and writes that sum too; layer_norm reads alpha and beta
        /// (`has_beta` 0: no beta). `group`: the threads that hold a row in the register
        /// forms (unused by the block form). A pointer an op does not read is never read.
        pub struct RowParams = "ROW_PARAMS(T)" {
            x: DevicePtr = "const T*",
            r: DevicePtr = "const T*",
            alpha: DevicePtr = "const T*",
            beta: DevicePtr = "const T*",
            sum: DevicePtr = "T*",
            out: DevicePtr = "T*",
            rows: u64,
            len: u64,
            eps: f32,
            has_beta: u32,
            group: u32,
        }
    }

    /// The row ops.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RowOp {
        Softmax,
        LogSoftmax,
        RmsNorm,
        AddRmsNorm,
        LayerNorm,
    }

    impl RowOp {
        pub const fn name(self) -> &'static str {
            ROW_KERNELS[self as usize * 3]
        }
    }

    /// How a kernel covers its rows.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RowShape {
        /// A block a row.
        Block,
        /// A group of threads a row, in registers, 16-byte packs.
        RegPack,
        /// A group of threads a row, in registers, an element at a time.
        RegElem,
    }

    /// The kernels, by op (in [`RowOp`]'s order) and shape (in [`RowShape`]'s).
    pub const ROW_KERNELS: [&str; 15] = [
        "softmax",
        "softmax_regpack",
        "softmax_regelem",
        "log_softmax",
        "log_softmax_regpack",
        "log_softmax_regelem",
        "rms_norm",
        "rms_norm_regpack",
        "rms_norm_regelem",
        "add_rms_norm",
        "add_rms_norm_regpack",
        "add_rms_norm_regelem",
        "layer_norm",
        "layer_norm_regpack",
        "layer_norm_regelem",
    ];

    /// The kernel of `op` in `shape`.
    pub const fn entry(op: RowOp, shape: RowShape) -> Entry<RowParams> {
        Entry::new(&super::NORM, ROW_KERNELS[op as usize * 3 + shape as usize])
    }
}

/// Attention of queries over a key/value cache in one launch (`cached_attention_<dtype>`), and a
/// decode step's rotary embedding with its cache write (`rope_kv_write_<dtype>`); the cache in
/// the queries' dtype, or a 16-bit cache under f32 queries (`<op>_cache_f16_f32`, `..._bf16_f32`).
pub const ATTENTION: KernelModule = KernelModule {
    headers: HEADERS,
    name: "attention",
    source: include_str!("attention.hip"),
    groups: &[
        EntryGroup {
            ops: &["cached_attention", "attention_split", "rope_kv_write"],
            dtypes: &["bf16", "f16", "f32", "f64"],
        },
        // f32 queries over a 16-bit cache: `<op>_cache_<cache dtype>` (attention::CACHE_OPS)
        EntryGroup {
            ops: &[
                "cached_attention_cache_f16",
                "attention_split_cache_f16",
                "rope_kv_write_cache_f16",
                "cached_attention_cache_bf16",
                "attention_split_cache_bf16",
                "rope_kv_write_cache_bf16",
            ],
            dtypes: &["f32"],
        },
    ],
    params: &[attention::Params::DECL, attention::RopeKvParams::DECL],
};

/// Forward attention over whole sequences without a (seq x seq) buffer
/// (`flash_attention_<dtype>`): grouped-query heads, causal and sliding windows, ALiBi, softcap,
/// variable lengths.
pub const FLASH_ATTENTION: KernelModule = KernelModule {
    headers: HEADERS,
    name: "flash_attention",
    source: include_str!("flash_attention.hip"),
    groups: &[
        EntryGroup {
            ops: &["flash_attention"],
            dtypes: &["bf16", "f16", "f32"],
        },
        EntryGroup {
            ops: &["flash_tiled_d64", "flash_tiled_d128", "flash_tiled_d256"],
            dtypes: &["bf16", "f16"],
        },
    ],
    params: &[flash_attention::Params::DECL],
};

/// The launch shape of `flash_attention` (flash_attention.hip's `FA_*` defines; a test checks
/// the two agree) and its parameter list.
pub mod flash_attention {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// `flash_attention_<dtype>`: q `[tokens_q, heads, head_dim]`, k and v `[tokens_k,
        /// kv_heads, head_dim]`, out q's shape; sequence b's rows from `cu_q[b]` / `cu_k[b]`
        /// (null: `b * seq_q` / `b * seq_k`, every sequence `seq_q` / `seq_k` long); ALiBi
        /// slopes (null: none) at `b * alibi_batch_stride + h`; a softcap of 0 is none; a
        /// negative window is no limit on that side (causal: `window_right` 0).
        pub struct Params = "FLASH_PARAMS(T)" {
            q: DevicePtr = "const T*",
            k: DevicePtr = "const T*",
            v: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            alibi: Option<DevicePtr> = "const float*",
            cu_q: Option<DevicePtr> = "const u32*",
            cu_k: Option<DevicePtr> = "const u32*",
            heads: u32,
            kv_heads: u32,
            head_dim: u32,
            seq_q: u32,
            seq_k: u32,
            alibi_batch_stride: u32,
            scale: f32,
            softcap: f32,
            window_left: i32,
            window_right: i32,
        }
    }

    /// Keyed by the dtype of q, k, v and out.
    pub const FLASH: Entry<Params> = Entry::new(&super::FLASH_ATTENTION, "flash_attention");
    /// Query rows a block takes (a warp each).
    pub const ROWS: u32 = 8;
    /// The longest head.
    pub const MAX_HEAD_DIM: u32 = 256;

    /// The tiled form on the matrix units (bf16 and f16), by the widest head each takes
    /// (`(widest head, entry)`, narrowest first); the same parameters as [`FLASH`].
    pub const TILED: [(u32, Entry<Params>); 3] = [
        (64, Entry::new(&super::FLASH_ATTENTION, "flash_tiled_d64")),
        (128, Entry::new(&super::FLASH_ATTENTION, "flash_tiled_d128")),
        (256, Entry::new(&super::FLASH_ATTENTION, "flash_tiled_d256")),
    ];
    /// Warps (wavefronts) a block of the tiled form has, 16 query rows each (`FT_WARPS`).
    pub const TILED_WARPS: u32 = 4;
    /// Query rows a block of the tiled form takes (`FT_ROWS`).
    pub const TILED_ROWS: u32 = 64;
}

/// Probes of compat.h's matrix units for the GPU tests (`mma_registers_<dtype>`,
/// `mma_tile_<dtype>`, bf16 and f16); no op launches them.
pub const MATRIX: KernelModule = KernelModule {
    headers: HEADERS,
    name: "matrix",
    source: include_str!("matrix.hip"),
    groups: &[EntryGroup {
        ops: &["mma_registers", "mma_tile"],
        dtypes: &["bf16", "f16"],
    }],
    params: &[matrix::Registers::DECL, matrix::Tile::DECL],
};

/// The probes' parameter lists and instruction numbers (matrix.hip's `MMA_PROBE_*`; a test
/// checks the two agree).
pub mod matrix {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// One warp runs `instruction` on registers given lane by lane: `a`, `b` (the dtype)
        /// and `c` (f32) hold [`REGS`] values a lane, lane-major; `d` gets c's registers after
        /// it; `ran[0]` is 1 where the target has the instruction, else 0.
        pub struct Registers = "MMA_REGISTERS_PARAMS(T)" {
            instruction: u32,
            a: DevicePtr = "const T*",
            b: DevicePtr = "const T*",
            c: DevicePtr = "const float*",
            d: DevicePtr = "float*",
            ran: DevicePtr = "u32*",
        }
    }
    crate::kernel_params! {
        /// One warp runs compat.h's tile operations on 16x16 row-major `a`, `b` and f32 `c`;
        /// `d` gets three 16x16 f32 results: `a b + c` with b loaded as rows of k, the same
        /// with b given transposed, and `round(a b) b + c` through `mma_c_to_a`.
        pub struct Tile = "MMA_TILE_PARAMS(T)" {
            a: DevicePtr = "const T*",
            b: DevicePtr = "const T*",
            c: DevicePtr = "const float*",
            d: DevicePtr = "float*",
        }
    }

    pub const REGISTERS: Entry<Registers> = Entry::new(&super::MATRIX, "mma_registers");
    pub const TILE: Entry<Tile> = Entry::new(&super::MATRIX, "mma_tile");
    /// Register slots a lane has in the probes' arrays.
    pub const REGS: usize = 16;
    /// NVIDIA's mma.sync.m16n8k16 (32 lanes).
    pub const M16N8K16: u32 = 0;
    /// CDNA's v_mfma_f32_16x16x16 (f16, bf16_1k), 64 lanes.
    pub const MFMA_16X16X16: u32 = 1;
    /// CDNA's v_mfma_f32_32x32x8 (f16, bf16_1k), 64 lanes.
    pub const MFMA_32X32X8: u32 = 2;
    /// RDNA3/4's v_wmma_f32_16x16x16 (f16, bf16), 32 lanes.
    pub const WMMA_16X16X16: u32 = 3;
}

/// The launch shape and argument values of `cached_attention` (attention.hip's `ATTN_*`
/// defines; a test checks the two agree), and the family's entries and parameter lists.
pub mod attention {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// `cached_attention` and its split form: `heads` query heads of `queries` rows each
        /// over a cache of `cache_len` positions of `kv_heads` heads (contiguous q, k, v, out);
        /// `mode` one of the `MODE_*` (positions: u32, query i of batch b at
        /// `positions[b * positions_stride + i]`, read with `MODE_POSITIONS` only; a stride of 0
        /// gives every batch the same positions). The split form writes each block's run to
        /// `partial` (the accumulator type's head_dim + 2 values a run), combined by the last
        /// block of a row to finish (a ticket a row); the one-block form reads neither.
        pub struct Params = "ATTN_PARAMS(T, C)" {
            q: DevicePtr = "const T*",
            k: DevicePtr = "const C*",
            v: DevicePtr = "const C*",
            positions: DevicePtr = "const u32*",
            partial: DevicePtr = "void*",
            out: DevicePtr = "T*",
            tickets: DevicePtr = "u32*",
            heads: u32,
            kv_heads: u32,
            queries: u32,
            head_dim: u32,
            cache_len: u32,
            scale: f32,
            mode: u32,
            positions_stride: u32,
        }
    }

    crate::kernel_params! {
        /// `rope_kv_write`: `t` tokens' stacked q/k/v rows, q roped to `q_out`, k roped and v
        /// written into the caches at the tokens' positions. With `per_token_cache` each token
        /// is a sequence of its own: token i writes cache i of `t` (`[t, kv_heads, cache_len,
        /// d]`) and q_out is `[t, heads, d]`; else one cache and q_out `[heads, t, d]`.
        pub struct RopeKvParams = "ROPE_KV_PARAMS(T, C)" {
            qkv: DevicePtr = "const T*",
            cos: DevicePtr = "const T*",
            sin: DevicePtr = "const T*",
            positions: DevicePtr = "const u32*",
            q_out: DevicePtr = "T*",
            k_cache: DevicePtr = "C*",
            v_cache: DevicePtr = "C*",
            t: u32,
            heads: u32,
            kv_heads: u32,
            d: u32,
            cache_len: u32,
            interleaved: u32,
            per_token_cache: u32,
        }
    }

    /// The cache of an attention entry: in the queries' dtype, or f16/bf16 under f32 queries.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Cache {
        Same,
        F16,
        Bf16,
    }

    /// `cached_attention` over a cache of `cache`.
    pub const fn cached(cache: Cache) -> Entry<Params> {
        Entry::new(&super::ATTENTION, CACHE_OPS[0].pick(cache))
    }

    /// `attention_split` over a cache of `cache`.
    pub const fn split(cache: Cache) -> Entry<Params> {
        Entry::new(&super::ATTENTION, CACHE_OPS[1].pick(cache))
    }

    /// `rope_kv_write` into a cache of `cache`.
    pub const fn rope_kv(cache: Cache) -> Entry<RopeKvParams> {
        Entry::new(&super::ATTENTION, CACHE_OPS[2].pick(cache))
    }

    /// An op's entries by cache: (in the queries' dtype, f16, bf16).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CacheOps(pub &'static str, pub &'static str, pub &'static str);

    impl CacheOps {
        const fn pick(&self, cache: Cache) -> &'static str {
            match cache {
                Cache::Same => self.0,
                Cache::F16 => self.1,
                Cache::Bf16 => self.2,
            }
        }
    }

    /// Threads a block: the kernel is built for exactly this many.
    pub const BLOCK: u32 = 512;
    /// The longest head the kernel holds (one block of threads).
    pub const MAX_HEAD_DIM: u32 = 256;
    /// Every query sees the whole cache.
    pub const MODE_ALL: u32 = 0;
    /// The queries are the cache's last positions, each seeing those up to its own.
    pub const MODE_CAUSAL: u32 = 1;
    /// Query i sees positions `0..=positions[i]` (a u32 tensor on the device).
    pub const MODE_POSITIONS: u32 = 2;
    /// Threads a block of the split form (`attention_split`), at most (its launch bound).
    pub const SPLIT_THREADS: u32 = 256;
    /// Key rows a lane of the split form loads at once.
    pub const SPLIT_UNROLL: u32 = 8;
    /// The ops and their entries over a 16-bit cache (under f32 queries: the second group of
    /// [`ATTENTION`](super::ATTENTION)).
    pub const CACHE_OPS: [CacheOps; 3] = [
        CacheOps(
            "cached_attention",
            "cached_attention_cache_f16",
            "cached_attention_cache_bf16",
        ),
        CacheOps(
            "attention_split",
            "attention_split_cache_f16",
            "attention_split_cache_bf16",
        ),
        CacheOps(
            "rope_kv_write",
            "rope_kv_write_cache_f16",
            "rope_kv_write_cache_bf16",
        ),
    ];
    /// Cache positions a block of the split form takes.
    pub const SPLIT_KEYS: u32 = 64;
}

/// Element widths: the filter keys of kernels that only move bytes (one instantiation serves
/// every dtype of that size; a run of elements may also travel as one wider unit).
pub const WIDTHS: [&str; 5] = ["w1", "w2", "w4", "w8", "w16"];

/// The width key of `bytes`-byte elements.
pub fn width_key(bytes: usize) -> Option<&'static str> {
    WIDTHS.into_iter().find(|w| w[1..].parse() == Ok(bytes))
}

/// Index dtypes the indexing kernels take (every one Candle's CPU backend accepts somewhere).
pub const ID_DTYPES: [&str; 5] = ["u8", "u32", "i16", "i32", "i64"];

/// gather / index_select and scatter (set), by width: `<op>_<id dtype>_<width>`; scatter-add
/// and index_add, by dtype: `<op>_<id dtype>_<dtype>`.
pub const INDEXING: KernelModule = KernelModule {
    headers: HEADERS,
    name: "indexing",
    source: include_str!("indexing.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "gather_u8",
                "gather_u32",
                "gather_i16",
                "gather_i32",
                "gather_i64",
                "index_rows_u8",
                "index_rows_u32",
                "index_rows_i16",
                "index_rows_i32",
                "index_rows_i64",
                "gather_last_u8",
                "gather_last_u32",
                "gather_last_i16",
                "gather_last_i32",
                "gather_last_i64",
                "scatter_own_u8",
                "scatter_own_u32",
                "scatter_own_i16",
                "scatter_own_i32",
                "scatter_own_i64",
                "scatter_claim_u8",
                "scatter_claim_u32",
                "scatter_claim_i16",
                "scatter_claim_i32",
                "scatter_claim_i64",
                "scatter_won_u8",
                "scatter_won_u32",
                "scatter_won_i16",
                "scatter_won_i32",
                "scatter_won_i64",
            ],
            dtypes: &WIDTHS,
        },
        EntryGroup {
            ops: &[
                "scatter_add_own_u8",
                "scatter_add_own_u32",
                "scatter_add_own_i16",
                "scatter_add_own_i32",
                "scatter_add_own_i64",
                "scatter_add_atomic_u8",
                "scatter_add_atomic_u32",
                "scatter_add_atomic_i16",
                "scatter_add_atomic_i32",
                "scatter_add_atomic_i64",
            ],
            dtypes: &DTYPES,
        },
    ],
    params: &[
        indexing::GatherParams::DECL,
        indexing::IndexRowsParams::DECL,
        indexing::GatherLastParams::DECL,
        indexing::ScatterOwnParams::DECL,
        indexing::ScatterClaimParams::DECL,
        indexing::ScatterWonParams::DECL,
        indexing::ScatterAddAtomicParams::DECL,
    ],
};

/// The indexing module's parameter lists and kernel families (indexing.hip): each family is
/// `<prefix>_<ids dtype>`, keyed by the moved unit's width (gathers, set scatters) or the
/// dtype (adds). `bad`, where given, counts ids out of range (null: not checked).
pub mod indexing {
    use crate::{DevicePtr, Family, KernelLayout};

    crate::kernel_params! {
        /// out = src at the ids over `n` units walked by the two views.
        pub struct GatherParams = "GATHER_PARAMS(I, R)" {
            src: DevicePtr = "const R*",
            ids: DevicePtr = "const I*",
            out: DevicePtr = "R*",
            n: u64,
            src_dim: u64,
            dim_stride: u64,
            src_view: KernelLayout,
            ids_view: KernelLayout,
            bad: Option<DevicePtr> = "u64*",
        }
    }

    crate::kernel_params! {
        /// index_select of whole rows of `right` units, a block a row.
        pub struct IndexRowsParams = "INDEX_ROWS_PARAMS(I, R)" {
            src: DevicePtr = "const R*",
            ids: DevicePtr = "const I*",
            out: DevicePtr = "R*",
            rows: u64,
            n_ids: u64,
            right: u64,
            src_dim: u64,
            ids_stride: u64,
            bad: Option<DevicePtr> = "u64*",
        }
    }

    crate::kernel_params! {
        /// gather along the last dim, a block a row of `m` ids.
        pub struct GatherLastParams = "GATHER_LAST_PARAMS(I, R)" {
            src: DevicePtr = "const R*",
            ids: DevicePtr = "const I*",
            out: DevicePtr = "R*",
            rows: u64,
            m: u64,
            src_len: u64,
            bad: Option<DevicePtr> = "u64*",
        }
    }

    crate::kernel_params! {
        /// A scatter (set or add) by ownership: a thread a column of `len` updates.
        pub struct ScatterOwnParams = "SCATTER_OWN_PARAMS(I, R)" {
            dst: DevicePtr = "R*",
            ids: DevicePtr = "const I*",
            src: DevicePtr = "const R*",
            n_cols: u64,
            len: u64,
            dst_dim: u64,
            dst_cols: KernelLayout,
            ids_cols: KernelLayout,
            src_cols: KernelLayout,
            dst_dim_stride: u64,
            ids_dim_stride: u64,
            src_dim_stride: u64,
            bad: Option<DevicePtr> = "u64*",
        }
    }

    crate::kernel_params! {
        /// A set scatter's first pass: each destination's last update claims it in `win`.
        pub struct ScatterClaimParams = "SCATTER_CLAIM_PARAMS(I)" {
            win: DevicePtr = "u32*",
            ids: DevicePtr = "const I*",
            n: u64,
            dst_dim: u64,
            dst_dim_stride: u64,
            dst_view: KernelLayout,
            ids_view: KernelLayout,
            bad: Option<DevicePtr> = "u64*",
        }
    }

    crate::kernel_params! {
        /// A set scatter's second pass: the claiming updates write.
        pub struct ScatterWonParams = "SCATTER_WON_PARAMS(I, R)" {
            dst: DevicePtr = "R*",
            win: DevicePtr = "const u32*",
            ids: DevicePtr = "const I*",
            src: DevicePtr = "const R*",
            n: u64,
            dst_dim: u64,
            dst_dim_stride: u64,
            dst_view: KernelLayout,
            ids_view: KernelLayout,
            src_view: KernelLayout,
        }
    }

    crate::kernel_params! {
        /// An add scatter with an atomic add per update.
        pub struct ScatterAddAtomicParams = "SCATTER_ADD_ATOMIC_PARAMS(I, T)" {
            dst: DevicePtr = "T*",
            ids: DevicePtr = "const I*",
            src: DevicePtr = "const T*",
            n: u64,
            dst_dim: u64,
            dst_dim_stride: u64,
            dst_view: KernelLayout,
            ids_view: KernelLayout,
            src_view: KernelLayout,
            bad: Option<DevicePtr> = "u64*",
        }
    }

    pub const GATHER: Family<GatherParams> = Family::new(&super::INDEXING, "gather");
    pub const INDEX_ROWS: Family<IndexRowsParams> = Family::new(&super::INDEXING, "index_rows");
    pub const GATHER_LAST: Family<GatherLastParams> = Family::new(&super::INDEXING, "gather_last");
    pub const SCATTER_OWN: Family<ScatterOwnParams> = Family::new(&super::INDEXING, "scatter_own");
    pub const SCATTER_ADD_OWN: Family<ScatterOwnParams> =
        Family::new(&super::INDEXING, "scatter_add_own");
    pub const SCATTER_CLAIM: Family<ScatterClaimParams> =
        Family::new(&super::INDEXING, "scatter_claim");
    pub const SCATTER_WON: Family<ScatterWonParams> = Family::new(&super::INDEXING, "scatter_won");
    pub const SCATTER_ADD_ATOMIC: Family<ScatterAddAtomicParams> =
        Family::new(&super::INDEXING, "scatter_add_atomic");
}

/// Nearest upsampling by width, bilinear by dtype.
pub const UPSAMPLE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "upsample",
    source: include_str!("upsample.hip"),
    groups: &[
        EntryGroup {
            ops: &["upsample_nearest1d", "upsample_nearest2d"],
            dtypes: &WIDTHS,
        },
        EntryGroup {
            ops: &["upsample_bilinear2d"],
            dtypes: &DTYPES,
        },
    ],
    params: &[upsample::Params::DECL],
};

/// The resizes' entries and their one parameter list (upsample.hip).
pub mod upsample {
    use crate::{DevicePtr, Entry, KernelLayout};

    crate::kernel_params! {
        /// `n` outputs of (b, c, [h,] w) images: the input's (b, c) offsets at `outer`, its
        /// spatial strides, sizes in and out, the source step an output pixel per axis and
        /// (bilinear) whether corners align. A 1-D resize leaves the h fields 1, 0.
        pub struct Params = "UPSAMPLE_PARAMS(T)" {
            src: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            outer: KernelLayout,
            stride_h: u64,
            stride_w: u64,
            h_in: u64,
            w_in: u64,
            h_out: u64,
            w_out: u64,
            scale_h: f64,
            scale_w: f64,
            align_corners: u32,
        }
    }

    /// Nearest, (b, c, w); keyed by element width.
    pub const NEAREST_1D: Entry<Params> = Entry::new(&super::UPSAMPLE, "upsample_nearest1d");
    /// Nearest, (b, c, h, w); keyed by element width.
    pub const NEAREST_2D: Entry<Params> = Entry::new(&super::UPSAMPLE, "upsample_nearest2d");
    /// Bilinear, (b, c, h, w); keyed by dtype.
    pub const BILINEAR_2D: Entry<Params> = Entry::new(&super::UPSAMPLE, "upsample_bilinear2d");
}

/// arg_sort along the last dim: tile sort and merge passes.
pub const SORT: KernelModule = KernelModule {
    headers: HEADERS,
    name: "sort",
    source: include_str!("sort.hip"),
    groups: &[EntryGroup {
        ops: &["argsort_tile", "argsort_merge"],
        dtypes: &DTYPES,
    }],
    params: &[sort::TileParams::DECL, sort::MergeParams::DECL],
};

/// The sort's entries and parameter lists (sort.hip).
pub mod sort {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// Sorts tiles of `p2` (a power of two) elements of `rows` rows of `len`: the columns
        /// to `final_out` where a row is one tile, else each tile's (key, column) pairs to
        /// `keys_out` / `idx_out` for the merge passes (the pointers not written: null).
        pub struct TileParams = "SORT_TILE_PARAMS(T)" {
            src: DevicePtr = "const T*",
            keys_out: Option<DevicePtr> = "u64*",
            idx_out: Option<DevicePtr> = "u32*",
            final_out: Option<DevicePtr> = "u32*",
            rows: u64,
            len: u64,
            p2: u32,
            descending: u32,
        }
    }

    crate::kernel_params! {
        /// Merges sorted runs of `width` pairs into runs of twice that: to `kout` / `iout`,
        /// or the last pass's columns to `final_out` (the pointers not written: null).
        pub struct MergeParams = "SORT_MERGE_PARAMS(T)" {
            kin: DevicePtr = "const u64*",
            iin: DevicePtr = "const u32*",
            kout: Option<DevicePtr> = "u64*",
            iout: Option<DevicePtr> = "u32*",
            final_out: Option<DevicePtr> = "u32*",
            rows: u64,
            len: u64,
            width: u64,
        }
    }

    pub const TILE: Entry<TileParams> = Entry::new(&super::SORT, "argsort_tile");
    pub const MERGE: Entry<MergeParams> = Entry::new(&super::SORT, "argsort_merge");
}

/// The portable convolution path (im2col by width, col2im by float dtype, direct transposed
/// convolutions of integers) and 2-D pooling.
pub const CONV: KernelModule = KernelModule {
    headers: HEADERS,
    name: "conv",
    source: include_str!("conv.hip"),
    groups: &[
        EntryGroup {
            ops: &["conv_im2col"],
            dtypes: &WIDTHS,
        },
        EntryGroup {
            ops: &["conv_col2im"],
            dtypes: &FLOAT_DTYPES,
        },
        EntryGroup {
            ops: &["conv_transpose_direct"],
            dtypes: &[
                "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
            ],
        },
        EntryGroup {
            ops: &["pool_max2d", "pool_avg2d"],
            dtypes: &DTYPES,
        },
    ],
    params: &[
        conv::Im2colParams::DECL,
        conv::Col2imParams::DECL,
        conv::PoolParams::DECL,
        conv::TransposeDirectParams::DECL,
    ],
};

/// The parameters of the conv module's entries (conv.hip) and the structs they take by value.
pub mod conv {
    use crate::params::{ArgSink, KernelArg};
    use crate::{DevicePtr, Entry};

    /// conv.hip's `ConvGeometry`: the image side's start and strides (elements) and sizes,
    /// the window, and whether the launch's indices fit 31 bits.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
    pub struct ConvGeometry {
        pub start: u64,
        pub stride_b: u64,
        pub stride_c: u64,
        pub stride_h: u64,
        pub stride_w: u64,
        pub c: u32,
        pub h: u32,
        pub w: u32,
        pub kh: u32,
        pub kw: u32,
        pub oh: u32,
        pub ow: u32,
        pub step_h: u32,
        pub step_w: u32,
        pub pad_h: u32,
        pub pad_w: u32,
        pub dil_h: u32,
        pub dil_w: u32,
        pub fits_u32: u32,
    }

    /// conv.hip's `Strides4`: a 4-D tensor's start and strides, in elements.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
    pub struct Strides4 {
        pub start: u64,
        pub strides: [u64; 4],
    }

    impl KernelArg for ConvGeometry {
        const C_TYPE: &'static str = "ConvGeometry";
        fn push_to<S: ArgSink>(&self, sink: &mut S) {
            sink.scalar(*self);
        }
    }

    impl KernelArg for Strides4 {
        const C_TYPE: &'static str = "Strides4";
        fn push_to<S: ArgSink>(&self, sink: &mut S) {
            sink.scalar(*self);
        }
    }

    crate::kernel_params! {
        /// `conv_im2col_<width>`: the columns of batch entries `b0..` of the image `x`, one
        /// thread per (entry, channel, column position), `n` of them.
        pub struct Im2colParams = "IM2COL_PARAMS(R)" {
            x: DevicePtr = "const R*",
            col: DevicePtr = "R*",
            n: u64,
            b0: u64,
            g: ConvGeometry,
        }
    }

    crate::kernel_params! {
        /// `conv_col2im_<dtype>`: the columns summed back into the image (batch entries
        /// `b0..`), one thread per image element, `n` of them.
        pub struct Col2imParams = "COL2IM_PARAMS(T)" {
            col: DevicePtr = "const T*",
            image: DevicePtr = "T*",
            n: u64,
            b0: u64,
            g: ConvGeometry,
        }
    }

    crate::kernel_params! {
        /// `pool_max2d_<dtype>` / `pool_avg2d_<dtype>`: one thread per output element.
        pub struct PoolParams = "POOL_PARAMS(T)" {
            x: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            g: ConvGeometry,
        }
    }

    crate::kernel_params! {
        /// `conv_transpose_direct_<dtype>`: one thread per output element; `xs` and `ws` are
        /// the input's and kernel's layouts, `c_in` the input channels.
        pub struct TransposeDirectParams = "CONV_TRANSPOSE_DIRECT_PARAMS(T)" {
            x: DevicePtr = "const T*",
            w: DevicePtr = "const T*",
            out: DevicePtr = "T*",
            n: u64,
            g: ConvGeometry,
            xs: Strides4,
            ws: Strides4,
            c_in: u32,
            groups: u32,
        }
    }

    /// Image to columns (keyed by element width).
    pub const IM2COL: Entry<Im2colParams> = Entry::new(&super::CONV, "conv_im2col");
    /// Columns back to the image (floats).
    pub const COL2IM: Entry<Col2imParams> = Entry::new(&super::CONV, "conv_col2im");
    /// Max pooling.
    pub const POOL_MAX2D: Entry<PoolParams> = Entry::new(&super::CONV, "pool_max2d");
    /// Average pooling.
    pub const POOL_AVG2D: Entry<PoolParams> = Entry::new(&super::CONV, "pool_avg2d");
    /// A transposed convolution computed directly.
    pub const TRANSPOSE_DIRECT: Entry<TransposeDirectParams> =
        Entry::new(&super::CONV, "conv_transpose_direct");

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_structs_match_conv_hips() {
            // conv.hip: five u64 then fourteen u32, no padding; a u64 and four u64.
            assert_eq!(std::mem::size_of::<ConvGeometry>(), 5 * 8 + 14 * 4);
            assert_eq!(std::mem::size_of::<Strides4>(), 5 * 8);
            let source = super::super::CONV.source;
            for field in [
                "u32 step_h, step_w;",
                "u32 fits_u32;",
                "u64 start, stride_b",
            ] {
                assert!(source.contains(field), "{field}");
            }
        }
    }
}

/// Dtypes the random draws produce directly.
pub const RANDOM_DTYPES: [&str; 5] = ["bf16", "f16", "f32", "f64", "f8e4m3"];

/// Uniform and normal draws (Philox4x32-10).
pub const RANDOM: KernelModule = KernelModule {
    headers: HEADERS,
    name: "random",
    source: include_str!("random.hip"),
    groups: &[EntryGroup {
        ops: &["rand_uniform", "rand_normal"],
        dtypes: &RANDOM_DTYPES,
    }],
    params: &[random::UniformParams::DECL, random::NormalParams::DECL],
};

/// The random module's parameter lists and entries (random.hip): `n` draws into `out` from
/// the counter-based generator's `seed` and stream `offset`.
pub mod random {
    use crate::{DevicePtr, Entry};

    crate::kernel_params! {
        /// Draws in [lo, hi).
        pub struct UniformParams = "RAND_UNIFORM_PARAMS(T)" {
            out: DevicePtr = "T*",
            n: u64,
            seed: u64,
            offset: u64,
            lo: f64,
            hi: f64,
        }
    }

    crate::kernel_params! {
        /// Draws of N(mean, std^2).
        pub struct NormalParams = "RAND_NORMAL_PARAMS(T)" {
            out: DevicePtr = "T*",
            n: u64,
            seed: u64,
            offset: u64,
            mean: f64,
            std: f64,
        }
    }

    pub const UNIFORM: Entry<UniformParams> = Entry::new(&super::RANDOM, "rand_uniform");
    pub const NORMAL: Entry<NormalParams> = Entry::new(&super::RANDOM, "rand_normal");
}

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
pub const QUANTIZED: KernelModule = KernelModule {
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
                "moe_grouped_q8_f32",
                "moe_grouped_q8_f16",
                "moe_grouped_q8_bf16",
                "moe_route",
            ],
            dtypes: &GGML_BLOCK_TYPES,
        },
    ],
    params: &[
        quantized::DequantizeParams::DECL,
        quantized::EmbeddingParams::DECL,
        quantized::MatvecParams::DECL,
        quantized::QuantizeQ8Params::DECL,
        quantized::RmsNormQ8Params::DECL,
        quantized::SwigluQ8Params::DECL,
        quantized::MatvecQ8Params::DECL,
        quantized::MatvecQ8fParams::DECL,
        quantized::MoeQ8Params::DECL,
        quantized::MoeGroupedQ8Params::DECL,
        quantized::MoeRouteParams::DECL,
    ],
};

/// The quantized module's parameter lists and entries (quantized.hip). Weights are `w` (or the
/// table `t`) in the device layout with `total` blocks; `O` / `X` is the float type of the
/// output or activations. Families are `<prefix>_<float dtype>`, keyed by the GGML type.
pub mod quantized {
    use crate::{DevicePtr, Entry, Family};

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
        /// rms norm of x (+ r, written to `sum`, where `has_residual`) straight to q8.
        pub struct RmsNormQ8Params = "RMS_NORM_Q8_PARAMS(X)" {
            x: DevicePtr = "const X*",
            r: DevicePtr = "const X*",
            sum: DevicePtr = "X*",
            alpha: DevicePtr = "const X*",
            out: DevicePtr = "u8*",
            m: u64,
            k: u64,
            eps: f32,
            scheme: u32,
            has_residual: u32,
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
        }
    }

    pub const DEQUANTIZE: Family<DequantizeParams> = Family::new(&super::QUANTIZED, "dequantize");
    pub const EMBEDDING: Family<EmbeddingParams> = Family::new(&super::QUANTIZED, "embedding");
    pub const MATVEC: Family<MatvecParams> = Family::new(&super::QUANTIZED, "matvec");
    pub const MATVEC_Q8: Family<MatvecQ8Params> = Family::new(&super::QUANTIZED, "matvec_q8");
    /// One activation row (no other rows' accumulators).
    pub const MATVEC1_Q8: Family<MatvecQ8Params> = Family::new(&super::QUANTIZED, "matvec1_q8");
    pub const MATVEC_Q8F: Family<MatvecQ8fParams> = Family::new(&super::QUANTIZED, "matvec_q8f");
    pub const MATVEC1_Q8F: Family<MatvecQ8fParams> = Family::new(&super::QUANTIZED, "matvec1_q8f");
    pub const MOE_Q8: Family<MoeQ8Params> = Family::new(&super::QUANTIZED, "moe_q8");
    pub const MOE_GROUPED_Q8: Family<MoeGroupedQ8Params> =
        Family::new(&super::QUANTIZED, "moe_grouped_q8");
    /// Keyed by the activations' float type.
    pub const QUANTIZE_Q8: Entry<QuantizeQ8Params> = Entry::new(&super::QUANTIZED, "quantize_q8");
    /// Keyed by the activations' float type.
    pub const RMS_NORM_Q8: Entry<RmsNormQ8Params> = Entry::new(&super::QUANTIZED, "rms_norm_q8");
    /// Keyed by the activations' float type.
    pub const SWIGLU_Q8: Entry<SwigluQ8Params> = Entry::new(&super::QUANTIZED, "swiglu_q8");
    /// Keyed by the weights' block type.
    pub const MOE_ROUTE: Entry<MoeRouteParams> = Entry::new(&super::QUANTIZED, "moe_route");
}

/// Modules nearly every model of a dtype uses: when the first kernel of a key is needed, the
/// runtime compiles these modules' variants of that key in the background ([`companions`]).
pub const PREFETCH_MODULES: [&str; 9] = [
    "unary", "binary", "cast", "fill", "reduce", "norm", "indexing", "ternary", "rope",
];

/// The module variants to compile in the background once a kernel of `key` is first needed:
/// every [`PREFETCH_MODULES`] module built for `key`, and the byte-moving ones (keyed by
/// width) at the width of `key`'s elements (`element_bytes`, where `key` names a dtype) and
/// at 16 bytes, the unit contiguous runs travel in.
pub fn companions(
    key: &str,
    element_bytes: Option<usize>,
) -> Vec<(&'static KernelModule, &'static str)> {
    let widths: Vec<&'static str> = element_bytes
        .and_then(width_key)
        .into_iter()
        .chain(width_key(16))
        .collect();
    ALL_MODULES
        .iter()
        .copied()
        .filter(|m| PREFETCH_MODULES.contains(&m.name))
        .flat_map(|m| {
            let keys = m.filter_keys();
            let own = keys.iter().copied().find(|k| *k == key);
            own.into_iter()
                .chain(widths.iter().copied().filter(move |w| keys.contains(w)))
                .map(move |k| (m, k))
        })
        .collect()
}

/// Every module, for the compile tiers to iterate over.
pub const ALL_MODULES: &[&KernelModule] = &[
    &FILL,
    &UNARY,
    &BINARY,
    &CAST,
    &TERNARY,
    &ROPE,
    &REDUCE,
    &NORM,
    &INDEXING,
    &UPSAMPLE,
    &SORT,
    &CONV,
    &RANDOM,
    &QUANTIZED,
    &ATTENTION,
    &FLASH_ATTENTION,
    &MATRIX,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The wave64 emulation's block limit is compat.h's.
    #[test]
    fn the_wave64_wave_limit_is_compat_hs() {
        let line = COMPAT_H
            .lines()
            .find(|l| l.starts_with("#define CANDLE_ROCM_WAVE64_MAX_WAVES "))
            .unwrap();
        assert_eq!(
            line.split_whitespace().nth(2),
            Some(&*rocm_device::WAVE64_MAX_WAVES.to_string())
        );
    }

    #[test]
    fn every_op_is_named_in_its_source() {
        // The compile tiers check the real symbols; this catches a list out of step early.
        for module in ALL_MODULES {
            for op in module.ops() {
                // `cast_u8` comes from `cast_##SN##_##DN`, `gather_u8` from `gather_##IN...`
                let family = op.rsplit_once('_').map_or(op, |(f, _)| f);
                assert!(
                    module.source.contains(op) || module.source.contains(&format!("{family}_##")),
                    "module {} never names `{op}`",
                    module.name
                );
            }
        }
    }

    #[test]
    fn attention_constants_match_the_kernel_source() {
        let define = |name: &str| {
            ATTENTION
                .define(name)
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or_else(|| panic!("attention.hip defines no u32 {name}"))
        };
        assert_eq!(define("ATTN_BLOCK"), attention::BLOCK);
        assert_eq!(define("ATTN_MAX_HEAD_DIM"), attention::MAX_HEAD_DIM);
        assert_eq!(define("ATTN_SPLIT_THREADS"), attention::SPLIT_THREADS);
        assert_eq!(define("ATTN_SPLIT_KEYS"), attention::SPLIT_KEYS);
        assert_eq!(define("ATTN_SPLIT_UNROLL"), attention::SPLIT_UNROLL);
        for attention::CacheOps(op, over_f16, over_bf16) in attention::CACHE_OPS {
            assert!(ATTENTION.entry_point(op, "f32").is_some(), "{op}");
            for entry in [over_f16, over_bf16] {
                assert_eq!(
                    ATTENTION.entry_point(entry, "f32"),
                    Some(format!("{entry}_f32"))
                );
            }
        }
        assert_eq!(define("ATTN_ALL"), attention::MODE_ALL);
        assert_eq!(define("ATTN_CAUSAL"), attention::MODE_CAUSAL);
        assert_eq!(define("ATTN_POSITIONS"), attention::MODE_POSITIONS);
    }

    #[test]
    fn flash_attention_constants_match_the_kernel_source() {
        let define = |name: &str| {
            FLASH_ATTENTION
                .define(name)
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or_else(|| panic!("flash_attention.hip defines no u32 {name}"))
        };
        assert_eq!(define("FA_ROWS"), flash_attention::ROWS);
        assert_eq!(define("FA_MAX_HEAD_DIM"), flash_attention::MAX_HEAD_DIM);
        assert_eq!(define("FT_WARPS"), flash_attention::TILED_WARPS);
        assert_eq!(define("FT_ROWS"), flash_attention::TILED_ROWS);
        for (dmax, entry) in flash_attention::TILED {
            assert_eq!(entry.op, format!("flash_tiled_d{dmax}"));
        }
    }

    #[test]
    fn matrix_probe_numbers_match_the_kernel_source() {
        let define = |name: &str| MATRIX.define(name).map(|v| v as u32);
        assert_eq!(define("MMA_PROBE_REGS"), Some(matrix::REGS as u32));
        assert_eq!(define("MMA_PROBE_M16N8K16"), Some(matrix::M16N8K16));
        assert_eq!(
            define("MMA_PROBE_MFMA_16X16X16"),
            Some(matrix::MFMA_16X16X16)
        );
        assert_eq!(define("MMA_PROBE_MFMA_32X32X8"), Some(matrix::MFMA_32X32X8));
        assert_eq!(
            define("MMA_PROBE_WMMA_16X16X16"),
            Some(matrix::WMMA_16X16X16)
        );
    }

    #[test]
    fn every_declared_parameter_list_is_taken_by_its_source() {
        for module in ALL_MODULES {
            for decl in module.params {
                let name = decl.macro_name();
                assert!(
                    module.source.contains(&format!("{name}(")),
                    "module {} never takes {name}",
                    module.name
                );
                assert!(
                    !module.source.contains(&format!("#define {name}")),
                    "module {} defines {name} itself",
                    module.name
                );
            }
        }
        assert!(ROPE
            .full_source()
            .contains("#define ROPE_PARAMS(T) const T* x, const T* cos"));
    }

    #[test]
    fn entry_points_are_op_times_dtype() {
        let names: Vec<String> = FILL.entry_points().collect();
        assert_eq!(names.len(), 7 * DTYPES.len() + WIDTHS.len());
        assert!(names.contains(&"copy_strided_f8e4m3".to_string()));
        assert!(names.contains(&"copy2d_w16".to_string()));
        assert_eq!(
            FILL.entry_point("fill", "bf16").as_deref(),
            Some("fill_bf16")
        );
        assert_eq!(FILL.entry_point("fill", "q4k"), None);
        assert_eq!(FILL.entry_point("nope", "f32"), None);
    }

    #[test]
    fn ops_of_several_parts_are_found_in_the_table() {
        assert_eq!(INDEXING.op_named(&["gather", "i64"]), Some("gather_i64"));
        assert_eq!(
            INDEXING.op_named(&["scatter_add", "own", "u8"]),
            Some("scatter_add_own_u8")
        );
        assert_eq!(
            NORM.op_named(&["softmax", "regpack"]),
            Some("softmax_regpack")
        );
        assert_eq!(REDUCE.op_named(&["sum", "finish"]), Some("sum_finish"));
        assert_eq!(REDUCE.op_named(&["sum"]), Some("sum"));
        assert_eq!(REDUCE.op_named(&["su"]), None);
        assert_eq!(REDUCE.op_named(&["sum", "finis"]), None);
        assert_eq!(INDEXING.op_named(&["gather", "f32"]), None);
    }

    #[test]
    fn a_dtypes_companions_are_the_prefetch_modules_at_its_key_and_widths() {
        let got = companions("bf16", Some(2));
        let has = |m: &str, k: &str| {
            got.iter()
                .any(|(module, key)| module.name == m && *key == k)
        };
        assert!(has("unary", "bf16") && has("rope", "bf16") && has("norm", "bf16"));
        assert!(has("indexing", "w2") && has("indexing", "w16"));
        assert!(got.iter().all(|(m, _)| PREFETCH_MODULES.contains(&m.name)));
        // a key no prefetch module is built for (a GGUF block type): the 16-byte movers only
        let block_type = companions("q4k", None);
        assert!(!block_type.is_empty() && block_type.iter().all(|(_, k)| *k == "w16"));
    }

    #[test]
    fn a_family_names_its_entry_by_the_whole_name() {
        let op = |f: Family<indexing::GatherParams>, ids: &str| f.entry(&[ids]).map(|e| e.op);
        assert_eq!(op(indexing::GATHER, "u32"), Some("gather_u32"));
        assert_eq!(
            indexing::GATHER_LAST.entry(&["u32"]).map(|e| e.op),
            Some("gather_last_u32")
        );
        assert_eq!(op(indexing::GATHER, "f32"), None);
        assert_eq!(cast::CAST.entry(&["bf16"]).map(|e| e.op), Some("cast_bf16"));
    }

    #[test]
    fn width_keys_name_byte_sizes() {
        assert_eq!(width_key(2), Some("w2"));
        assert_eq!(width_key(16), Some("w16"));
        assert_eq!(width_key(3), None);
        assert_eq!(INDEXING.filter_keys().len(), WIDTHS.len() + DTYPES.len());
        assert_eq!(
            INDEXING.entry_point("gather_i64", "w16").as_deref(),
            Some("gather_i64_w16")
        );
    }

    #[test]
    fn module_names_are_unique_and_sources_nonempty() {
        let mut names: Vec<&str> = ALL_MODULES.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL_MODULES.len());
        assert!(ALL_MODULES.iter().all(|m| !m.source.trim().is_empty()));
    }

    #[test]
    fn prelude_guards_the_platform_choice() {
        assert!(COMPAT_H.contains("CANDLE_ROCM_AMD"));
        assert!(COMPAT_H.contains("CANDLE_ROCM_NVIDIA"));
        assert!(FILL.full_source().starts_with("#line 1 \"compat.h\""));
    }
}
