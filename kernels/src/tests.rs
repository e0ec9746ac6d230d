//! The tables against their sources: every op named in its module, shared constants equal
//! to their definitions in the headers.

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
    assert_eq!(define("ATTN_GROUP_THREADS"), attention::GROUP_THREADS);
    assert_eq!(
        define("ATTN_GROUP_MAX_THREADS"),
        attention::GROUP_MAX_THREADS
    );
    assert_eq!(define("ATTN_GROUP_HEADS"), attention::GROUP_HEADS);
    for attention::CacheOps(op, over_f16, over_bf16) in attention::CACHE_OPS {
        assert!(ATTENTION.entry_point(op, "f32").is_some(), "{op}");
        for entry in [over_f16, over_bf16] {
            assert_eq!(
                ATTENTION.entry_point(entry, "f32"),
                Some(format!("{entry}_f32"))
            );
        }
    }
    assert_eq!(define("ATTN_MATRIX_KEYS"), attention::MATRIX_KEYS);
    assert_eq!(define("ATTN_MATRIX_ROWS"), attention::MATRIX_ROWS);
    assert_eq!(define("ATTN_MATRIX_STAGES"), attention::MATRIX_STAGES);
    assert_eq!(define("ATTN_MATRIX_MAX_WARPS"), attention::MATRIX_MAX_WARPS);
    for (dmax, attention::CacheOps(op, over_f16, over_bf16)) in attention::MATRIX {
        assert_eq!(op, format!("attention_split_matrix_d{dmax}"));
        for dtype in ["bf16", "f16"] {
            assert!(ATTENTION.entry_point(op, dtype).is_some(), "{op} {dtype}");
        }
        for entry in [over_f16, over_bf16] {
            assert_eq!(
                ATTENTION.entry_point(entry, "f32"),
                Some(format!("{entry}_f32"))
            );
        }
        // one warp fits AMD's workgroups at every width, with q in two parts
        assert!(
            attention::matrix_shared_bytes(dmax, 2, 1) <= 64 << 10,
            "{dmax}"
        );
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
    for (dmax, entry) in flash_attention::TILED {
        assert_eq!(entry.op, format!("flash_tiled_d{dmax}"));
    }
    for (set, shapes) in [
        ("SYNC", flash_attention::TILED_SYNC),
        ("LDS", flash_attention::TILED_LDS),
    ] {
        let dims: Vec<u32> = shapes.iter().map(|s| s.dmax).collect();
        assert_eq!(dims, flash_attention::TILED.map(|(d, _)| d));
        for s in shapes {
            let d = s.dmax;
            assert_eq!(
                define(&format!("FT_{set}_MT_{d}")),
                s.row_tiles,
                "{set} {d}"
            );
            assert_eq!(define(&format!("FT_{set}_BC_{d}")), s.key_rows, "{set} {d}");
            assert_eq!(
                define(&format!("FT_{set}_QS_{d}")),
                s.q_shared as u32,
                "{set} {d}"
            );
        }
    }
    // AMD's workgroups hold the LDS set's blocks, scratch tiles included
    for s in flash_attention::TILED_LDS {
        assert!(s.shared_bytes(true) <= 64 << 10, "{s:?}");
    }
    let scratch_ld = COMPAT_H
        .lines()
        .find_map(|l| l.strip_prefix("#define MMA_SCRATCH_LD "))
        .unwrap();
    assert_eq!(scratch_ld.trim(), flash_attention::SCRATCH_LD.to_string());
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
    for (name, value) in [
        ("MMA_PROBE_I8_REGS", matrix::I8_REGS as u32),
        ("MMA_PROBE_M16N8K32_S8", matrix::M16N8K32_S8),
        (
            "MMA_PROBE_MFMA_I32_16X16X32_I8",
            matrix::MFMA_I32_16X16X32_I8,
        ),
        (
            "MMA_PROBE_MFMA_I32_16X16X16_I8",
            matrix::MFMA_I32_16X16X16_I8,
        ),
        (
            "MMA_PROBE_WMMA_I32_16X16X16_IU8",
            matrix::WMMA_I32_16X16X16_IU8,
        ),
    ] {
        assert_eq!(define(name), Some(value), "{name}");
    }
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

#[test]
fn the_dtype_lists_follow_rocm_devices_dtypes() {
    assert_eq!(
        DTYPES,
        ["u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "f8e4m3"]
    );
    assert_eq!(FLOAT_DTYPES, ["bf16", "f16", "f32", "f64", "f8e4m3"]);
    assert_eq!(INT_DTYPES, ["u8", "u32", "i16", "i32", "i64"]);
    assert_eq!(CONDITION_DTYPES, INT_DTYPES);
}
