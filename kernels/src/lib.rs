//! The kernel sources of candle-rocm, embedded as strings.
//!
//! Each op family is one `.hip` file whose templates are instantiated per dtype as
//! `extern "C"` entry points named `<op>_<dtype>` (dtype names as Candle's `DType::as_str`).
//! The runtime compiles a module with [`prelude`] in front: `compat.h`, the only place where
//! the AMD (hiprtc) and NVIDIA (NVRTC) builds differ, then the shared layout header.

/// `compat.h`: per-platform types, shuffles, ballots and narrow atomics.
pub const COMPAT_H: &str = include_str!("../include/compat.h");
/// `layout.h`: the by-value strided layout struct and its index decoding.
pub const LAYOUT_H: &str = include_str!("../include/layout.h");

/// Dtype names as Candle 0.11.1's `DType::as_str`, in the order modules instantiate them.
pub const DTYPES: [&str; 10] = [
    "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "f8e4m3",
];

/// One kernel module: a source file and the entry points it defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelModule {
    /// Short name, also the file stem (`fill` for `fill.hip`).
    pub name: &'static str,
    /// The HIP C++ source, without the prelude.
    pub source: &'static str,
    /// Op names; each is instantiated for every dtype in `dtypes` as `<op>_<dtype>`.
    pub ops: &'static [&'static str],
    /// Dtypes the ops are instantiated for.
    pub dtypes: &'static [&'static str],
}

impl KernelModule {
    /// Every `extern "C"` entry point of the module.
    pub fn entry_points(&self) -> impl Iterator<Item = String> + '_ {
        self.ops
            .iter()
            .flat_map(move |op| self.dtypes.iter().map(move |dt| format!("{op}_{dt}")))
    }

    /// Name of the entry point for `op` and `dtype`, if the module has it.
    pub fn entry_point(&self, op: &str, dtype: &str) -> Option<String> {
        (self.ops.contains(&op) && self.dtypes.contains(&dtype)).then(|| format!("{op}_{dtype}"))
    }

    /// The full translation unit: prelude, then the module source with its own line numbers.
    pub fn full_source(&self) -> String {
        format!(
            "{}\n#line 1 \"{}.hip\"\n{}",
            prelude(),
            self.name,
            self.source
        )
    }
}

/// The headers every module is compiled with, in order.
pub fn prelude() -> String {
    format!("#line 1 \"compat.h\"\n{COMPAT_H}\n#line 1 \"layout.h\"\n{LAYOUT_H}\n")
}

/// fill, iota, contiguous copy and strided copy.
pub const FILL: KernelModule = KernelModule {
    name: "fill",
    source: include_str!("fill.hip"),
    ops: &["fill", "iota", "copy", "copy_strided"],
    dtypes: &DTYPES,
};

/// Every module, for the compile tiers to iterate over.
pub const ALL_MODULES: &[&KernelModule] = &[&FILL];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_an_entry_point_macro_line() {
        for module in ALL_MODULES {
            for op in module.ops {
                let needle = format!("void {op}_##NAME(");
                assert!(
                    module.source.contains(&needle),
                    "module {} lacks `{needle}`",
                    module.name
                );
            }
        }
    }

    #[test]
    fn entry_points_are_op_times_dtype() {
        let names: Vec<String> = FILL.entry_points().collect();
        assert_eq!(names.len(), FILL.ops.len() * DTYPES.len());
        assert!(names.contains(&"copy_strided_f8e4m3".to_string()));
        assert_eq!(
            FILL.entry_point("fill", "bf16").as_deref(),
            Some("fill_bf16")
        );
        assert_eq!(FILL.entry_point("fill", "q4k"), None);
        assert_eq!(FILL.entry_point("nope", "f32"), None);
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
