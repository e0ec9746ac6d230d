//! ABI facts the amd platform and the vendor-library FFI rely on (enum values, struct sizes
//! and field offsets), each declared once with the C expression that gives its value in the
//! ROCm headers. The FFI code uses the constants; the AMD tier's probe prints every
//! expression compiled against the real headers, and the tests compare the two.

/// One ABI fact: the C expression the headers evaluate, and our value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbiValue {
    /// A C expression over the ROCm headers (`hipErrorNoDevice`, `sizeof(T)`,
    /// `offsetof(T, field)`); also the key of the probe's output line.
    pub header: &'static str,
    pub ours: u64,
}

/// Declares ABI constants and, under `$table`, their [`AbiValue`]s:
/// `abi_constants!(TABLE; HIP_SUCCESS: u32 = 0 => "hipSuccess"; ...)`.
#[macro_export]
macro_rules! abi_constants {
    ($table:ident; $($(#[$meta:meta])* $name:ident: $ty:ty = $value:expr => $header:literal;)*) => {
        $($(#[$meta])* pub const $name: $ty = $value;)*
        /// Every constant of this module with the header expression that must equal it.
        pub const $table: &[$crate::abi::AbiValue] = &[
            $($crate::abi::AbiValue { header: $header, ours: $name as u64 },)*
        ];
    };
}

/// The [`AbiValue`]s of a `#[repr(C)]` mirror of a C struct: its size and the offset of each
/// field, e.g. `struct_layout!(P, "hipDeviceProp_tR0600", [name => "name", ...])`.
#[macro_export]
macro_rules! struct_layout {
    ($rust:ty, $c:literal, [$($field:ident => $c_field:literal),* $(,)?]) => {
        &[
            $crate::abi::AbiValue {
                header: concat!("sizeof(", $c, ")"),
                ours: std::mem::size_of::<$rust>() as u64,
            },
            $($crate::abi::AbiValue {
                header: concat!("offsetof(", $c, ", ", $c_field, ")"),
                ours: std::mem::offset_of!($rust, $field) as u64,
            },)*
        ]
    };
}

/// The C++ source of a probe printing `<expression> <value>` for every entry of `tables`
/// (compiled against the ROCm headers, `-D__HIP_PLATFORM_AMD__`).
pub fn probe_source(includes: &[&str], tables: &[&[AbiValue]]) -> String {
    let mut s = String::from("#include <stdio.h>\n#include <stddef.h>\n");
    for inc in includes {
        s += &format!("#include <{inc}>\n");
    }
    s += "int main(void) {\n";
    for v in tables.iter().flat_map(|t| t.iter()) {
        s += &format!(
            "  printf(\"%s %lu\\n\", \"{0}\", (unsigned long)({0}));\n",
            v.header
        );
    }
    s + "  return 0;\n}\n"
}

/// Compares `tables` with a probe's output (`<expression> <value>` lines): the number of
/// values checked, or every mismatch and missing line.
pub fn check_against_probe(
    tables: &[&[AbiValue]],
    probe_output: &str,
) -> std::result::Result<usize, Vec<String>> {
    let header: std::collections::HashMap<&str, &str> = probe_output
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .collect();
    let mut problems = Vec::new();
    let mut checked = 0;
    for v in tables.iter().flat_map(|t| t.iter()) {
        match header.get(v.header).map(|h| h.trim().parse::<u64>()) {
            Some(Ok(h)) if h == v.ours => checked += 1,
            Some(Ok(h)) => problems.push(format!("{}: header {h}, ours {}", v.header, v.ours)),
            Some(Err(_)) => problems.push(format!("{}: the probe printed no number", v.header)),
            None => problems.push(format!("{}: not in the probe's output", v.header)),
        }
    }
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    mod sample {
        crate::abi_constants!(TABLE;
            /// A documented value.
            ONE: i32 = 1 => "ONE";
            BIG: u32 = 500 => "big_value";
        );
        #[repr(C)]
        pub struct S {
            pub a: u8,
            pub b: u64,
        }
        pub const LAYOUT: &[crate::abi::AbiValue] = crate::struct_layout!(S, "s_t", [b => "b"]);
    }

    #[test]
    fn tables_hold_every_constant_and_layout_fact() {
        assert_eq!(sample::ONE, 1);
        assert_eq!(
            sample::TABLE,
            &[
                AbiValue {
                    header: "ONE",
                    ours: 1
                },
                AbiValue {
                    header: "big_value",
                    ours: 500
                }
            ]
        );
        assert_eq!(sample::LAYOUT[0].header, "sizeof(s_t)");
        assert_eq!((sample::LAYOUT[0].ours, sample::LAYOUT[1].ours), (16, 8));
        assert_eq!(sample::LAYOUT[1].header, "offsetof(s_t, b)");
    }

    #[test]
    fn the_probe_prints_every_expression_and_is_read_back() {
        let src = probe_source(&["hip/hip_runtime_api.h"], &[sample::TABLE, sample::LAYOUT]);
        assert!(src.contains("#include <hip/hip_runtime_api.h>"));
        assert!(src.contains("(unsigned long)(offsetof(s_t, b))"));
        let good = "ONE 1\nbig_value 500\nsizeof(s_t) 16\noffsetof(s_t, b) 8\n";
        assert_eq!(
            check_against_probe(&[sample::TABLE, sample::LAYOUT], good),
            Ok(4)
        );
        let bad = "ONE 2\nbig_value x\nsizeof(s_t) 16\n";
        let problems = check_against_probe(&[sample::TABLE, sample::LAYOUT], bad).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("header 2, ours 1"));
    }
}
