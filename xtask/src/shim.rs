//! The HIP shim of the `--amd-shim` GPU mode (`shim/`): `libamdhip64.so` and `libhiprtc.so`
//! built against ROCm's own headers, on top of the CUDA driver and NVRTC, and `librccl.so`
//! (RCCL's API on NVIDIA's NCCL). Its HIP entry points are the exact list of HIP calls the amd
//! platform makes: the AMD tier checks that the shim exports them all and nothing else, and
//! that docs/testing.md prints the same list; its RCCL entry points are the calls of rocm-ccl's FFI
//! table, checked the same way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::root;
use crate::tools::run_echo;

/// (source in shim/, the library it becomes).
const LIBRARIES: [(&str, &str); 3] = [
    ("hip_runtime_on_cuda.c", "libamdhip64.so"),
    ("hiprtc_on_nvrtc.c", "libhiprtc.so"),
    ("rccl_on_nccl.c", "librccl.so"),
];

/// The shim library that serves RCCL.
const RCCL_LIBRARY: &str = "librccl.so";

/// docs/testing.md's list sits between these lines.
const README_START: &str = "<!-- hip-shim-entry-points -->";
const README_END: &str = "<!-- /hip-shim-entry-points -->";

/// Builds both libraries into `lib_dir` with the ROCm headers under `include`; warnings are
/// errors, so a signature that drifts from the header's declaration stops the build.
pub fn build(include: &Path, lib_dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(lib_dir).map_err(|e| e.to_string())?;
    let mut built = Vec::new();
    for (source, library) in LIBRARIES {
        let out = lib_dir.join(library);
        let (ok, _) = run_echo(
            Command::new("cc")
                .args(["-std=c11", "-D_GNU_SOURCE", "-D__HIP_PLATFORM_AMD__"])
                .args(["-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared"])
                .arg(format!("-I{}", include.display()))
                .arg(root().join("shim").join(source))
                .arg("-o")
                .arg(&out)
                .args(["-ldl", "-lpthread"]),
        )?;
        if !ok {
            return Err(format!(
                "shim/{source} did not build against the ROCm headers"
            ));
        }
        built.push(out);
    }
    Ok(built)
}

/// The functions a shared library defines (`nm -D --defined-only`, text symbols).
fn exported(library: &Path) -> Result<BTreeSet<String>, String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(library)
        .output()
        .map_err(|e| format!("nm: {e}"))?;
    if !out.status.success() {
        return Err(format!("nm {} failed", library.display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let (_, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            (kind == "T").then(|| name.to_string())
        })
        .collect())
}

/// The HIP and hiprtc functions `source` calls through cubecl-hip-sys (`hip::hipX(`).
fn called(source: &str) -> BTreeSet<String> {
    source
        .split("hip::")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let after = rest[name.len()..].trim_start();
            (name.starts_with("hip") && after.starts_with('(')).then_some(name)
        })
        .collect()
}

/// The backquoted names of docs/testing.md's list.
fn readme_list(readme: &str) -> Result<BTreeSet<String>, String> {
    let start = readme
        .find(README_START)
        .ok_or("docs/testing.md has no HIP shim entry point list")?;
    let end = readme[start..]
        .find(README_END)
        .ok_or("docs/testing.md's HIP shim list is not closed")?;
    Ok(readme[start..start + end]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect())
}

/// Builds the shim against `include` into `work` and compares its entry points with the amd
/// platform's calls and docs/testing.md; one line per finding, the first of them failures.
pub fn check(include: &Path, work: &Path) -> Result<String, String> {
    let libraries = build(include, &work.join("hip-shim"))?;
    let (mut exports, mut rccl_exports) = (BTreeSet::new(), BTreeSet::new());
    for l in &libraries {
        if l.file_name().is_some_and(|f| f == RCCL_LIBRARY) {
            rccl_exports.extend(exported(l)?);
        } else {
            exports.extend(exported(l)?);
        }
    }
    let ccl_symbols: BTreeSet<String> = rocm_device::sys::nccl::Functions::SYMBOLS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let amd_rs = root().join("crates/rocm-device/src/platform/amd.rs");
    let calls = called(&std::fs::read_to_string(&amd_rs).map_err(|e| e.to_string())?);
    let readme = readme_list(
        &std::fs::read_to_string(root().join("docs").join("testing.md"))
            .map_err(|e| e.to_string())?,
    )?;
    let diff = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Vec<String> {
        a.difference(b).cloned().collect()
    };
    let mut problems = Vec::new();
    for (what, names) in [
        (
            "called by amd.rs, missing from the shim",
            diff(&calls, &exports),
        ),
        (
            "in the shim, never called by amd.rs",
            diff(&exports, &calls),
        ),
        (
            "called by amd.rs, missing from docs/testing.md's list",
            diff(&calls, &readme),
        ),
        (
            "in docs/testing.md's list, never called by amd.rs",
            diff(&readme, &calls),
        ),
        (
            "in the NCCL table of rocm_device::sys, missing from the RCCL shim",
            diff(&ccl_symbols, &rccl_exports),
        ),
        (
            "in the RCCL shim, not in the NCCL table of rocm_device::sys",
            diff(&rccl_exports, &ccl_symbols),
        ),
    ] {
        if !names.is_empty() {
            problems.push(format!("{what}: {}", names.join(", ")));
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "HIP shim: built against the ROCm headers; its {} HIP entry points are the amd \
             platform's calls and docs/testing.md's list, its {} RCCL entry points the NCCL table of rocm_device::sys",
            exports.len(),
            rccl_exports.len()
        ))
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_functions_followed_by_parentheses() {
        let src = "let s: hip::hipStream_t = x; unsafe { hip::hipMalloc(&mut p, n) }; \
                   hip::hiprtcGetCode (p, c); f as hip::hipFunction_t)";
        let got: Vec<_> = called(src).into_iter().collect();
        assert_eq!(got, ["hipMalloc", "hiprtcGetCode"]);
    }

    #[test]
    fn the_readme_list_is_what_sits_between_the_markers() {
        let text = format!("`before` {README_START}\n`hipInit`, `hipMalloc`\n{README_END} `after`");
        let got: Vec<_> = readme_list(&text).unwrap().into_iter().collect();
        assert_eq!(got, ["hipInit", "hipMalloc"]);
        assert!(readme_list("no list").is_err());
    }
}
