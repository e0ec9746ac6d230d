//! How fast the emulator runs AMD machine code: `fill_f32` of a code object over 4 M floats
//! (1,024 workgroups of 256), wave-instructions per second, on one thread or spread over
//! THREADS.
//!
//! `cargo run --release -p amdgpu-emu --example emu_speed -- path/to/fill.co [THREADS]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_emu::exec::{dispatch, Launch, Memory};
use amdgpu_emu::CodeObject;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: emu_speed FILL.co [THREADS]");
    let threads: usize = std::env::args().nth(2).map_or(1, |t| t.parse().unwrap());
    let co = CodeObject::parse(&std::fs::read(&path).unwrap()).unwrap();
    let n = 4usize << 20;
    let mut mem = Memory::new();
    let out = mem.alloc(4 * n);
    let mut args = vec![0u8; 24];
    args[0..8].copy_from_slice(&out.to_le_bytes());
    args[8..12].copy_from_slice(&2.5f32.to_bits().to_le_bytes());
    args[16..24].copy_from_slice(&(n as u64).to_le_bytes());
    let launch = Launch {
        grid: [1024 * 256, 1, 1],
        block: [256, 1, 1],
        args,
        threads,
        ..Launch::default()
    };
    let start = std::time::Instant::now();
    let report = dispatch(&co, "fill_f32", &launch, &mut mem).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let got = mem.download(out, 4 * n).unwrap();
    assert!(got
        .chunks_exact(4)
        .all(|c| c == 2.5f32.to_bits().to_le_bytes()));
    println!(
        "{} on {threads} thread(s): {} wave-instructions in {secs:.3} s: {:.2} M wave-instructions/s",
        co.arch.name(),
        report.wave_instructions,
        report.wave_instructions as f64 / secs / 1e6
    );
}
