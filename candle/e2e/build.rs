//! Fingerprints the code that computes the KL divergence's CPU reference (src/kld.rs), so that a
//! reference cached on disk is used only by the code that made it: this crate's sources, the
//! LLM runtime's (the tokenizer and chat template), Candle's patches and overlay, and the
//! lock file that pins every crate's version. Any change to them makes a new key.

use std::fs;
use std::path::{Path, PathBuf};

/// FNV-1a over 64 bits: enough to tell versions of the code apart, with no dependency.
fn fnv1a(state: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *state ^= u64::from(b);
        *state = state.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let candle = here
        .parent()
        .expect("candle/e2e sits in candle/")
        .to_path_buf();
    let roots = [
        here.join("src"),
        candle.join("llm/src"),
        candle.join("patches"),
        candle.join("overlay"),
        candle.join("Cargo.lock"),
    ];
    let mut files = Vec::new();
    for root in &roots {
        println!("cargo:rerun-if-changed={}", root.display());
        if root.is_dir() {
            files_under(root, &mut files);
        } else {
            files.push(root.clone());
        }
    }
    files.sort();
    let mut state = 0xcbf2_9ce4_8422_2325u64;
    for file in &files {
        let name = file.strip_prefix(&candle).unwrap_or(file);
        let bytes = fs::read(file).unwrap_or_default();
        fnv1a(&mut state, name.to_string_lossy().as_bytes());
        fnv1a(&mut state, &(bytes.len() as u64).to_le_bytes());
        fnv1a(&mut state, &bytes);
    }
    println!("cargo:rustc-env=CANDLE_ROCM_KLD_CODE={state:016x}");
}
