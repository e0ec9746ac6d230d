//! What a kernel module is to the runtime: its source text, entry points, parameter lists and
//! headers (the table of modules and their sources is the `rocm-kernels` crate's), the typed
//! parameters a launch passes ([`params`]) and the by-value layout kernels take ([`layout`]).

pub mod layout;
pub mod params;

pub use layout::{KernelLayout, LayoutError, MAX_DIMS};
pub use params::{
    concat_names, ArgSink, DevicePtr, Entry, Family, KernelArg, KernelParams, ParamsDecl,
};

/// Ops instantiated for every dtype of a list: entry points `<op>_<dtype>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryGroup {
    pub ops: &'static [&'static str],
    pub dtypes: &'static [&'static str],
}

/// One kernel module: a source file and the entry points it defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelModule {
    /// Short name, also the file stem (`fill` for `fill.hip`).
    pub name: &'static str,
    /// The HIP C++ source, without the prelude.
    pub source: &'static str,
    /// The entry points, as op x dtype groups.
    pub groups: &'static [EntryGroup],
    /// The parameter lists its entries take (see [`params`]), defined before its source.
    pub params: &'static [ParamsDecl],
    /// The headers compiled in front of it, `(file name, text)`, in order (the kernel table
    /// owns them; the runtime only joins them).
    pub headers: &'static [(&'static str, &'static str)],
}

impl KernelModule {
    /// Every `extern "C"` entry point of the module.
    pub fn entry_points(&self) -> impl Iterator<Item = String> + '_ {
        self.groups.iter().flat_map(|g| {
            g.ops
                .iter()
                .flat_map(move |op| g.dtypes.iter().map(move |dt| format!("{op}_{dt}")))
        })
    }

    /// The op of this module spelled `parts` joined by `_` (`["gather", "u8"]` is
    /// `gather_u8`), as the table holds it; how launchers name ops made of several parts
    /// without building strings.
    pub fn op_named(&self, parts: &[&str]) -> Option<&'static str> {
        self.op_spelled(parts.iter().copied())
    }

    /// [`KernelModule::op_named`] over any sequence of parts (no list built: a launch's
    /// lookup allocates nothing).
    pub fn op_spelled<'a>(
        &self,
        parts: impl Iterator<Item = &'a str> + Clone,
    ) -> Option<&'static str> {
        self.ops().find(|op| {
            let mut rest = *op;
            for (i, part) in parts.clone().enumerate() {
                if i > 0 {
                    match rest.strip_prefix('_') {
                        Some(r) => rest = r,
                        None => return false,
                    }
                }
                match rest.strip_prefix(part) {
                    Some(r) => rest = r,
                    None => return false,
                }
            }
            rest.is_empty()
        })
    }

    /// Name of the entry point for `op` and `dtype`, if the module has it: the one place an
    /// entry name is spelled.
    pub fn entry_point(&self, op: &str, dtype: &str) -> Option<String> {
        self.groups
            .iter()
            .any(|g| g.ops.contains(&op) && g.dtypes.contains(&dtype))
            .then(|| format!("{op}_{dtype}"))
    }

    /// The translation unit restricted to the entry points of one dtype (the `dtypes` side of
    /// each group; for cast that is the source dtype, for where the value dtype).
    pub fn source_for_dtype(&self, dtype: &str) -> String {
        format!(
            "#define CANDLE_ROCM_DTYPE_FILTER 1\n#define CANDLE_ROCM_ONLY_{dtype} 1\n{}",
            self.full_source()
        )
    }

    /// Module name of the one-dtype translation unit.
    pub fn name_for_dtype(&self, dtype: &str) -> String {
        format!("{}.{dtype}", self.name)
    }

    /// The keys a one-dtype translation unit may be restricted to (dtypes or widths), each once.
    pub fn filter_keys(&self) -> Vec<&'static str> {
        let mut keys: Vec<&'static str> = Vec::new();
        for k in self.groups.iter().flat_map(|g| g.dtypes.iter().copied()) {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    }

    /// Every op name of the module (each group's ops, in order).
    pub fn ops(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.groups.iter().flat_map(|g| g.ops.iter().copied())
    }

    /// The value of the module's `#define NAME value` (an integer, a `u` suffix allowed): how
    /// the host's copies of a kernel's launch constants are held to the source.
    pub fn define(&self, name: &str) -> Option<u64> {
        let prefix = format!("#define {name} ");
        let line = self.source.lines().find(|l| l.starts_with(&prefix))?;
        line[prefix.len()..]
            .trim()
            .trim_end_matches('u')
            .parse()
            .ok()
    }

    /// The headers in front of the source (see [`prelude_of`]).
    pub fn prelude(&self) -> String {
        prelude_of(self.headers)
    }

    /// The full translation unit: the headers, the parameter lists' macros, then the module
    /// source with its own line numbers.
    pub fn full_source(&self) -> String {
        let defines: String = self.params.iter().map(|p| p.define() + "\n").collect();
        format!(
            "{}\n{defines}#line 1 \"{}.hip\"\n{}",
            self.prelude(),
            self.name,
            self.source
        )
    }
}

/// Headers as one text, each under its own `#line` name, in order.
pub fn prelude_of(headers: &[(&str, &str)]) -> String {
    headers
        .iter()
        .map(|(name, text)| format!("#line 1 \"{name}\"\n{text}\n"))
        .collect()
}
