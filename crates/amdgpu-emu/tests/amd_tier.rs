//! The AMD tier of the emulator (inside the ROCm chroot): the code objects hiprtc makes of
//! every kernel module for gfx1100 and gfx942 load; each lists exactly its table's kernels,
//! each with a descriptor whose entry is in `.text`, the wavefront size of its arch, and
//! arguments (the hidden ones of code object v5 where the kernel reads them) inside its
//! argument segment.
//!
//! One file, one binary: it runs inside the chroot, once per AMD tier, on the code objects
//! rocm-device's tier leaves there.
//!
//! Every instruction of every code object decodes as llvm-objdump decodes it: the same
//! instruction boundaries (lengths, literal constants included), the same mnemonic, and the
//! same operands (the decoder's printer gives llvm-objdump's line).
//!
//! The code objects: `CANDLE_ROCM_CODE_OBJECT_DIR/<arch>/<module>.co` where the tier's earlier
//! step (rocm-device's) wrote them, else compiled here. llvm-objdump: `LLVM_OBJDUMP`, else
//! LLVM 21's (the chroot's), else ROCm's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_emu::decode::{decode_all, Instruction};
use amdgpu_emu::{Arch, ArgKind, CodeObject};
use rocm_device::compile::compile_for_arch;
use rocm_device::Platform;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The architectures the emulator runs.
const ARCHS: [Arch; 2] = [Arch::Gfx1100, Arch::Gfx942];

fn modules() -> Vec<&'static rocm_kernels::KernelModule> {
    let only = std::env::var("CANDLE_ROCM_TIER_MODULES").unwrap_or_default();
    rocm_kernels::ALL_MODULES
        .iter()
        .copied()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n == m.name))
        .collect()
}

/// The code object of `module` for `arch`: its file (written here where it was compiled here).
fn code_object(module: &rocm_kernels::KernelModule, arch: Arch) -> PathBuf {
    if let Some(dir) = std::env::var_os("CANDLE_ROCM_CODE_OBJECT_DIR") {
        let path = Path::new(&dir)
            .join(arch.name())
            .join(format!("{}.co", module.name));
        if path.is_file() {
            return path;
        }
    }
    let image = compile_for_arch(Platform::Amd, module, arch.name(), &[], None)
        .unwrap_or_else(|e| panic!("{} for {}: {e}", module.name, arch.name()))
        .image;
    let dir = std::env::temp_dir()
        .join("amdgpu-emu-code-objects")
        .join(arch.name());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.co", module.name));
    std::fs::write(&path, image).unwrap();
    path
}

fn llvm_objdump() -> PathBuf {
    if let Some(p) = std::env::var_os("LLVM_OBJDUMP") {
        return p.into();
    }
    let rocm =
        std::env::var_os("ROCM_PATH").map_or_else(|| PathBuf::from("/opt/rocm"), PathBuf::from);
    [
        PathBuf::from("/usr/bin/llvm-objdump-21"),
        rocm.join("llvm/bin/llvm-objdump"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect(
        "llvm-objdump: none found (LLVM_OBJDUMP, /usr/bin/llvm-objdump-21, $ROCM_PATH/llvm/bin)",
    )
}

/// One line of llvm-objdump's disassembly.
struct ObjdumpLine {
    address: u64,
    mnemonic: String,
    /// A VOPD pair's second mnemonic.
    second: Option<String>,
    /// Length in bytes.
    len: usize,
    /// The instruction's text, its spaces folded.
    text: String,
}

fn objdump_lines(path: &Path, arch: Arch) -> Vec<ObjdumpLine> {
    let out = Command::new(llvm_objdump())
        .args(["-d", &format!("--mcpu={}", arch.name())])
        .arg(path)
        .output()
        .expect("running llvm-objdump");
    assert!(
        out.status.success(),
        "llvm-objdump {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .filter_map(|l| {
            let (asm, comment) = l.split_once("//")?;
            let (addr, words) = comment.trim().split_once(": ")?;
            let address = u64::from_str_radix(addr.trim(), 16).ok()?;
            let mnemonic = asm.split_whitespace().next()?.to_string();
            let second = asm
                .split_once("::")
                .and_then(|(_, y)| y.split_whitespace().next())
                .map(String::from);
            Some(ObjdumpLine {
                address,
                mnemonic,
                second,
                // the words, then a branch's target label
                len: 4 * words
                    .split_whitespace()
                    .take_while(|w| w.len() == 8 && u32::from_str_radix(w, 16).is_ok())
                    .count(),
                text: asm.split_whitespace().collect::<Vec<_>>().join(" "),
            })
        })
        .collect()
}

#[test]
fn every_module_loads_with_its_kernels_descriptors_and_arguments() {
    let (mut kernels, mut with_hidden) = (0, 0);
    for arch in ARCHS {
        for module in modules() {
            let what = format!("{} for {}", module.name, arch.name());
            let co = CodeObject::parse(&std::fs::read(code_object(module, arch)).unwrap())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(co.arch, arch, "{what}: {}", co.target);
            let mut listed: Vec<String> = module.entry_points().collect();
            let mut found: Vec<String> = co.kernels.iter().map(|k| k.name.clone()).collect();
            listed.sort();
            found.sort();
            assert_eq!(found, listed, "{what}: kernels against the table");
            for k in &co.kernels {
                let what = format!("{what}: {}", k.name);
                assert!(
                    (co.text.0..co.text.1).contains(&k.entry),
                    "{what}: entry {:#x} outside .text {:x?}",
                    k.entry,
                    co.text
                );
                let wave = if k.descriptor.wave32() { 32 } else { 64 };
                assert_eq!(
                    wave, k.wavefront_size,
                    "{what}: descriptor against metadata"
                );
                match arch {
                    Arch::Gfx1100 => assert_eq!(wave, 32, "{what}"),
                    Arch::Gfx942 => assert_eq!(wave, 64, "{what}"),
                }
                assert_eq!(
                    k.descriptor.kernarg_size, k.kernarg_segment_size,
                    "{what}: kernarg sizes"
                );
                if k.hidden("block_count_x").is_some() {
                    with_hidden += 1;
                }
                for a in &k.args {
                    assert!(
                        a.offset + a.size <= k.kernarg_segment_size,
                        "{what}: {a:?} past the segment"
                    );
                    assert!(!matches!(a.kind, ArgKind::Other(_)), "{what}: {a:?}");
                }
                kernels += 1;
            }
        }
    }
    println!(
        "AMD tier: {kernels} kernels of gfx1100 and gfx942 code objects loaded ({with_hidden} \
         with hidden arguments)"
    );
    assert!(with_hidden > 0);
}

#[test]
fn every_instruction_decodes_as_llvm_objdump_decodes_it() {
    use amdgpu_emu::decode::print;
    let (mut total, mut differ) = (0usize, Vec::new());
    let (mut printed, mut text_differ) = (0usize, Vec::new());
    let mut not_printed: HashMap<String, usize> = HashMap::new();
    for arch in ARCHS {
        for module in modules() {
            let path = code_object(module, arch);
            let co = CodeObject::parse(&std::fs::read(&path).unwrap()).unwrap();
            let text = &co.image[co.text.0 as usize..co.text.1 as usize];
            let ours: HashMap<u64, Instruction> = decode_all(arch, text, co.text.0)
                .unwrap_or_else(|e| panic!("{} for {}: {e}", module.name, arch.name()))
                .into_iter()
                .map(|i| (i.address, i))
                .collect();
            for line in objdump_lines(&path, arch) {
                total += 1;
                let inst = ours.get(&line.address);
                let agrees = inst.is_some_and(|i| {
                    i.mnemonic == line.mnemonic
                        && i.len == line.len
                        && i.second.map(String::from) == line.second
                });
                if !agrees && differ.len() < 20 {
                    differ.push(format!(
                        "{} {} {:#x}: llvm-objdump {} {:?} ({} bytes), ours {:?}",
                        arch.name(),
                        module.name,
                        line.address,
                        line.mnemonic,
                        line.second,
                        line.len,
                        inst.map(|i| (i.mnemonic, i.second, i.len))
                    ));
                }
                let Some(inst) = inst else { continue };
                match print::text(arch, inst) {
                    Some(t) if t == line.text => printed += 1,
                    got => {
                        if got.is_none() {
                            *not_printed.entry(format!("{:?}", inst.format)).or_default() += 1;
                        }
                        if text_differ.len() < 20 {
                            text_differ.push(format!(
                                "{} {} {:#x}: llvm-objdump `{}`, ours {got:?}",
                                arch.name(),
                                module.name,
                                line.address,
                                line.text
                            ));
                        }
                    }
                }
            }
        }
    }
    println!(
        "AMD tier: {total} instructions of gfx1100 and gfx942 decoded as llvm-objdump decodes them \
         ({} differ); {printed} ({:.1}%) printed as it prints them",
        differ.len(),
        100.0 * printed as f64 / total.max(1) as f64
    );
    let mut not_printed: Vec<_> = not_printed.into_iter().collect();
    not_printed.sort_by_key(|p| std::cmp::Reverse(p.1));
    println!("AMD tier: not printed yet, by encoding: {not_printed:?}");
    assert!(total > 1_000_000 || std::env::var_os("CANDLE_ROCM_TIER_MODULES").is_some());
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // every instruction printed as llvm-objdump prints it (100% since the SDWA, true16
    // op_sel, matrix, scratch and d16 forms were added)
    assert!(text_differ.is_empty(), "{}", text_differ.join("\n"));
    assert_eq!(printed, total);
}

/// The code object of a module by name, loaded.
fn loaded(module: &str, arch: Arch) -> CodeObject {
    let m = rocm_kernels::ALL_MODULES
        .iter()
        .find(|m| m.name == module)
        .unwrap();
    CodeObject::parse(&std::fs::read(code_object(m, arch)).unwrap()).unwrap()
}

/// `fill_<dtype>` (fill.hip: `out[i] = value` for i < n, grid-stride, 16-byte stores on the
/// aligned middle): the AMD machine code runs in the emulator on both archs, over lengths
/// and misalignments that take each of its paths; every element is the value, and a store
/// past the buffer would be an error.
#[test]
fn fill_runs_in_the_emulator_on_both_archs() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory};
    let mut instructions = 0;
    for arch in ARCHS {
        let co = loaded("fill", arch);
        for (n, skew) in [(1usize, 0usize), (37, 0), (1000, 0), (1000, 1), (4099, 3)] {
            let mut mem = Memory::new();
            let buf = mem.upload(&vec![0xffu8; 4 * (n + skew)]);
            let out = buf + 4 * skew as u64;
            let value = 1.5f32.to_bits();
            let mut args = vec![0u8; 24];
            args[0..8].copy_from_slice(&out.to_le_bytes());
            args[8..12].copy_from_slice(&value.to_le_bytes());
            args[16..24].copy_from_slice(&(n as u64).to_le_bytes());
            let launch = Launch {
                grid: [512, 1, 1],
                block: [256, 1, 1],
                args,
                dynamic_lds: 0,
                schedule: Default::default(),
                step_limit: None,
                ..Launch::default()
            };
            let report = dispatch(&co, "fill_f32", &launch, &mut mem)
                .unwrap_or_else(|e| panic!("{} n={n} skew={skew}: {e}", arch.name()));
            instructions += report.wave_instructions;
            let got = mem.download(buf, 4 * (n + skew)).unwrap();
            for (i, c) in got.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let want = if i < skew { u32::MAX } else { value };
                assert_eq!(v, want, "{} n={n} skew={skew}: element {i}", arch.name());
            }
        }
    }
    println!("AMD tier: fill_f32 ran in the emulator on gfx1100 and gfx942 ({instructions} wave-instructions)");
}

/// Kernel arguments as the kernel's metadata lays them out: each parameter `params` pushes
/// (in order) at the offset of the next explicit argument.
struct Kernargs(Vec<Vec<u8>>);

impl rocm_kernels::ArgSink for Kernargs {
    fn scalar<T: bytemuck::Pod>(&mut self, value: T) {
        self.0.push(bytemuck::bytes_of(&value).to_vec());
    }
    fn pointer(&mut self, ptr: rocm_kernels::DevicePtr) {
        self.0.push(ptr.addr.to_le_bytes().to_vec());
    }
}

fn kernargs<P: rocm_kernels::KernelParams>(k: &amdgpu_emu::KernelInfo, params: &P) -> Vec<u8> {
    let mut sink = Kernargs(Vec::new());
    params.push_to(&mut sink);
    let explicit: Vec<_> = k
        .args
        .iter()
        .filter(|a| !matches!(a.kind, ArgKind::Hidden(_)))
        .collect();
    assert_eq!(
        explicit.len(),
        sink.0.len(),
        "{}: arguments against its parameters",
        k.name
    );
    let mut out = vec![0u8; k.kernarg_segment_size as usize];
    for (a, bytes) in explicit.iter().zip(&sink.0) {
        assert_eq!(a.size as usize, bytes.len(), "{}: {a:?}", k.name);
        out[a.offset as usize..a.offset as usize + bytes.len()].copy_from_slice(bytes);
    }
    out
}

/// Runs elementwise kernel `k` of `co` with `params` (4 blocks of 256, grid-stride) and reads
/// back the `n` f32 at `out`.
fn run_f32<P: rocm_kernels::KernelParams>(
    co: &CodeObject,
    k: &amdgpu_emu::KernelInfo,
    params: &P,
    mem: &mut amdgpu_emu::exec::Memory,
    (out, n): (u64, usize),
) -> Vec<f32> {
    let launch = amdgpu_emu::exec::Launch {
        grid: [256 * 4, 1, 1],
        block: [256, 1, 1],
        args: kernargs(k, params),
        ..Default::default()
    };
    amdgpu_emu::exec::dispatch(co, &k.name, &launch, mem)
        .unwrap_or_else(|e| panic!("{} {}: {e}", co.arch.name(), k.name));
    bytemuck::cast_slice(&mem.download(out, 4 * n).unwrap()).to_vec()
}

fn ptr(addr: u64) -> rocm_kernels::DevicePtr {
    rocm_kernels::DevicePtr { addr, device: 0 }
}

/// Unary kernels of f32 (unary.hip: out[i] = op(input at i of the layout)) on a contiguous and
/// a transposed input, against the same op on the host.
#[test]
fn unary_f32_kernels_run_in_the_emulator() {
    use amdgpu_emu::exec::Memory;
    type HostOp = fn(f32) -> f32;
    let ops: [(&str, HostOp); 4] = [
        ("neg", |x| -x),
        ("abs", f32::abs),
        ("relu", |x| x.max(0.0)),
        ("sqr", |x| x * x),
    ];
    let (rows, cols) = (37usize, 29usize);
    let input: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
        .collect();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("unary", arch);
        for (op, host) in ops {
            for transposed in [false, false, true] {
                let name = format!("{op}_f32");
                let k = co.kernel(&name).unwrap();
                let mut mem = Memory::new();
                let x = mem.upload(bytemuck::cast_slice(&input));
                let out = mem.alloc(4 * rows * cols);
                let layout = if transposed {
                    rocm_kernels::KernelLayout::new(&[cols, rows], &[1, cols], 0).unwrap()
                } else {
                    rocm_kernels::KernelLayout::new(&[rows * cols], &[1], 0).unwrap()
                };
                let params = rocm_kernels::unary::Params {
                    input: ptr(x),
                    out: ptr(out),
                    n: (rows * cols) as u64,
                    l: layout,
                    p: 0.0,
                };
                let got = run_f32(&co, k, &params, &mut mem, (out, rows * cols));
                for (i, g) in got.iter().enumerate() {
                    let src = if transposed {
                        // element i of the (cols, rows) view with strides (1, cols)
                        let (c, r) = (i / rows, i % rows);
                        input[c + r * cols]
                    } else {
                        input[i]
                    };
                    assert_eq!(
                        g.to_bits(),
                        host(src).to_bits(),
                        "{} {name} [{i}]",
                        arch.name()
                    );
                }
                ran += 1;
            }
        }
    }
    println!("AMD tier: {ran} unary f32 runs in the emulator equal the host's");
}

/// Binary kernels of f32 (binary.hip: out[i] = a at i of its layout op b at i of its layout)
/// with b contiguous and broadcast along rows, against the host.
#[test]
fn binary_f32_kernels_run_in_the_emulator() {
    use amdgpu_emu::exec::Memory;
    type HostOp = fn(f32, f32) -> f32;
    let ops: [(&str, HostOp); 5] = [
        ("add", |a, b| a + b),
        ("sub", |a, b| a - b),
        ("mul", |a, b| a * b),
        ("maximum", f32::max),
        ("minimum", f32::min),
    ];
    let (rows, cols) = (19usize, 67usize);
    let a: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 31) % 97) as f32 / 8.0 - 6.0)
        .collect();
    let b: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 17) % 89) as f32 / 16.0 - 2.5)
        .collect();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("binary", arch);
        for (op, host) in ops {
            for broadcast in [false, true] {
                let name = format!("{op}_f32");
                let k = co.kernel(&name).unwrap();
                let mut mem = Memory::new();
                let pa = mem.upload(bytemuck::cast_slice(&a));
                let pb = mem.upload(bytemuck::cast_slice(&b));
                let out = mem.alloc(4 * rows * cols);
                let la = rocm_kernels::KernelLayout::new(&[rows, cols], &[cols, 1], 0).unwrap();
                let lb = if broadcast {
                    rocm_kernels::KernelLayout::new(&[rows, cols], &[0, 1], 0).unwrap()
                } else {
                    la
                };
                let params = rocm_kernels::binary::Params {
                    a: ptr(pa),
                    b: ptr(pb),
                    out: ptr(out),
                    n: (rows * cols) as u64,
                    la,
                    lb,
                };
                let got = run_f32(&co, k, &params, &mut mem, (out, rows * cols));
                for (i, g) in got.iter().enumerate() {
                    let bi = if broadcast { i % cols } else { i };
                    let want = host(a[i], b[bi]);
                    assert_eq!(
                        g.to_bits(),
                        want.to_bits(),
                        "{} {name} broadcast={broadcast} [{i}]",
                        arch.name()
                    );
                }
                ran += 1;
            }
        }
    }
    println!("AMD tier: {ran} binary f32 runs in the emulator equal the host's");
}

/// Reductions of f32 rows (reduce.hip's first pass, one chunk a row: the block reduces its
/// row through LDS and barriers) under each order of the waves between barriers: sum within
/// f32 rounding of the f64 sum, max exact.
#[test]
fn row_reductions_run_in_the_emulator_under_every_wave_order() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory, Schedule};
    let (rows, cols) = (7usize, 1000usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 2003) as f32 / 100.0 - 10.0)
        .collect();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("reduce", arch);
        for op in ["sum", "max"] {
            for schedule in [Schedule::InOrder, Schedule::Reversed, Schedule::Shuffled(7)] {
                let name = format!("{op}_f32");
                let k = co.kernel(&name).unwrap();
                let mut mem = Memory::new();
                let input = mem.upload(bytemuck::cast_slice(&x));
                let out = mem.upload(&vec![0xffu8; 4 * rows]);
                let partials = mem.alloc(4 * rows);
                let params = rocm_kernels::reduce::ReduceParams {
                    input: ptr(input),
                    out: ptr(out),
                    partials: ptr(partials),
                    n_out: rows as u64,
                    red_len: cols as u64,
                    kept: rocm_kernels::KernelLayout::new(&[rows], &[cols], 0).unwrap(),
                    red: rocm_kernels::KernelLayout::new(&[cols], &[1], 0).unwrap(),
                    chunk_len: cols.next_multiple_of(16) as u64,
                };
                let block = 256u32;
                let launch = Launch {
                    grid: [rows as u32 * block, 1, 1],
                    block: [block, 1, 1],
                    args: kernargs(k, &params),
                    dynamic_lds: 0,
                    schedule,
                    step_limit: None,
                    ..Launch::default()
                };
                dispatch(&co, &name, &launch, &mut mem)
                    .unwrap_or_else(|e| panic!("{} {name} {schedule:?}: {e}", arch.name()));
                let got: Vec<f32> =
                    bytemuck::cast_slice(&mem.download(out, 4 * rows).unwrap()).to_vec();
                for (r, g) in got.iter().enumerate() {
                    let row = &x[r * cols..(r + 1) * cols];
                    if op == "sum" {
                        let want: f64 = row.iter().map(|&v| f64::from(v)).sum();
                        let scale: f64 = row.iter().map(|&v| f64::from(v).abs()).sum();
                        assert!(
                            (f64::from(*g) - want).abs() <= 1e-5 * scale,
                            "{} {name} {schedule:?} row {r}: {g} against {want}",
                            arch.name()
                        );
                    } else {
                        let want = row.iter().copied().fold(f32::MIN, f32::max);
                        assert_eq!(*g, want, "{} {name} {schedule:?} row {r}", arch.name());
                    }
                }
                ran += 1;
            }
        }
    }
    println!("AMD tier: {ran} row reductions in the emulator (three wave orders) equal the host's");
}

/// A planted fault: `sum_f32` with its barriers taken out (each `s_barrier` made an `s_nop`,
/// the same length). Waves then run to their end one after another, so under one of the
/// orders a wave reads the LDS partials before the others wrote them and a row's sum is
/// wrong: the emulator's schedules expose a missing barrier.
#[test]
fn a_missing_barrier_changes_the_sum() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory, Schedule};
    const S_NOP_0: u32 = 0xBF80_0000;
    let (rows, cols) = (4usize, 1000usize);
    let x: Vec<f32> = (0..rows * cols).map(|i| (i % 13) as f32 + 1.0).collect();
    for arch in ARCHS {
        let mut co = loaded("reduce", arch);
        let k = co.kernel("sum_f32").unwrap().clone();
        let code = co.image[k.entry as usize..(k.entry + k.code_size) as usize].to_vec();
        let mut planted = 0;
        for inst in decode_all(arch, &code, k.entry).unwrap() {
            if inst.mnemonic == "s_barrier" {
                let at = inst.address as usize;
                co.image[at..at + 4].copy_from_slice(&S_NOP_0.to_le_bytes());
                planted += 1;
            }
        }
        assert!(planted > 0, "{}: sum_f32 has no barrier", arch.name());
        let run = |co: &CodeObject, schedule| {
            let mut mem = Memory::new();
            let input = mem.upload(bytemuck::cast_slice(&x));
            let out = mem.alloc(4 * rows);
            let partials = mem.alloc(4 * rows);
            let params = rocm_kernels::reduce::ReduceParams {
                input: ptr(input),
                out: ptr(out),
                partials: ptr(partials),
                n_out: rows as u64,
                red_len: cols as u64,
                kept: rocm_kernels::KernelLayout::new(&[rows], &[cols], 0).unwrap(),
                red: rocm_kernels::KernelLayout::new(&[cols], &[1], 0).unwrap(),
                chunk_len: cols.next_multiple_of(16) as u64,
            };
            let launch = Launch {
                grid: [rows as u32 * 256, 1, 1],
                block: [256, 1, 1],
                args: kernargs(&k, &params),
                dynamic_lds: 0,
                schedule,
                step_limit: None,
                ..Launch::default()
            };
            dispatch(co, "sum_f32", &launch, &mut mem).unwrap();
            let got: Vec<f32> =
                bytemuck::cast_slice(&mem.download(out, 4 * rows).unwrap()).to_vec();
            got
        };
        let want: Vec<f32> = x.chunks(cols).map(|r| r.iter().sum()).collect();
        let wrong: Vec<(Schedule, Vec<f32>)> = [Schedule::InOrder, Schedule::Reversed]
            .into_iter()
            .map(|s| (s, run(&co, s)))
            .filter(|(_, got)| *got != want)
            .collect();
        assert!(
            !wrong.is_empty(),
            "{}: the barrier-less sum is right in every order",
            arch.name()
        );
        println!(
            "AMD tier: {} sum_f32 without its {planted} barriers: {wrong:?} against {want:?}",
            arch.name()
        );
    }
}

/// Casts from f32 (cast.hip: `cast_f32_<to>`) to f16, bf16, i32 and u8, and f16 back to f32,
/// against `half` and Rust's conversions (round to nearest even; float to integer saturates).
#[test]
fn casts_run_in_the_emulator() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory};
    let n = 777usize;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 5003) as f32 * 0.731 - 1500.0 + (i % 7) as f32 * 1e-3)
        .collect();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("cast", arch);
        for to in ["f16", "bf16", "i32", "u8"] {
            let name = format!("cast_f32_{to}");
            let k = co.kernel(&name).unwrap();
            let mut mem = Memory::new();
            let input = mem.upload(bytemuck::cast_slice(&x));
            let size = match to {
                "f16" | "bf16" => 2,
                "u8" => 1,
                _ => 4,
            };
            let out = mem.alloc(size * n);
            let params = rocm_kernels::cast::Params {
                input: ptr(input),
                out: ptr(out),
                n: n as u64,
                l: rocm_kernels::KernelLayout::new(&[n], &[1], 0).unwrap(),
            };
            let launch = Launch {
                grid: [256 * 4, 1, 1],
                block: [256, 1, 1],
                args: kernargs(k, &params),
                ..Default::default()
            };
            dispatch(&co, &name, &launch, &mut mem)
                .unwrap_or_else(|e| panic!("{} {name}: {e}", arch.name()));
            let got = mem.download(out, size * n).unwrap();
            for (i, &v) in x.iter().enumerate() {
                let at = i * size;
                let g = &got[at..at + size];
                let want: Vec<u8> = match to {
                    "f16" => half::f16::from_f32(v).to_bits().to_le_bytes().to_vec(),
                    "bf16" => half::bf16::from_f32(v).to_bits().to_le_bytes().to_vec(),
                    "i32" => (v as i32).to_le_bytes().to_vec(),
                    _ => vec![v as u8],
                };
                assert_eq!(g, &want[..], "{} {name} [{i}] of {v}", arch.name());
            }
            ran += 1;
        }
    }
    println!("AMD tier: {ran} casts from f32 in the emulator equal the host's");
}

/// Softmax and rms_norm over rows (norm.hip's block form: a block a row, the row's max and
/// sums through LDS), against f64 on the host.
#[test]
fn softmax_and_rms_norm_run_in_the_emulator() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory, Schedule};
    let (rows, len) = (5usize, 300usize);
    let x: Vec<f32> = (0..rows * len)
        .map(|i| ((i * 7919) % 1009) as f32 / 100.0 - 5.0)
        .collect();
    let alpha: Vec<f32> = (0..len).map(|i| 0.5 + (i % 5) as f32 * 0.25).collect();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("norm", arch);
        for op in ["softmax", "rms_norm"] {
            for schedule in [Schedule::InOrder, Schedule::Shuffled(3)] {
                let name = format!("{op}_f32");
                let k = co.kernel(&name).unwrap();
                let mut mem = Memory::new();
                let px = mem.upload(bytemuck::cast_slice(&x));
                let pa = mem.upload(bytemuck::cast_slice(&alpha));
                let out = mem.upload(&vec![0xffu8; 4 * rows * len]);
                let params = rocm_kernels::norm::RowParams {
                    x: ptr(px),
                    r: ptr(px),
                    alpha: ptr(pa),
                    beta: ptr(pa),
                    sum: ptr(out),
                    out: ptr(out),
                    rows: rows as u64,
                    len: len as u64,
                    eps: 1e-5,
                    has_beta: 0,
                    group: 0,
                };
                let launch = Launch {
                    grid: [rows as u32 * 256, 1, 1],
                    block: [256, 1, 1],
                    args: kernargs(k, &params),
                    dynamic_lds: 0,
                    schedule,
                    step_limit: None,
                    ..Launch::default()
                };
                dispatch(&co, &name, &launch, &mut mem)
                    .unwrap_or_else(|e| panic!("{} {name}: {e}", arch.name()));
                let got: Vec<f32> =
                    bytemuck::cast_slice(&mem.download(out, 4 * rows * len).unwrap()).to_vec();
                for r in 0..rows {
                    let row: Vec<f64> = x[r * len..(r + 1) * len]
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect();
                    let want: Vec<f64> = if op == "softmax" {
                        let max = row.iter().copied().fold(f64::MIN, f64::max);
                        let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
                        let s: f64 = e.iter().sum();
                        e.iter().map(|v| v / s).collect()
                    } else {
                        let ms = row.iter().map(|v| v * v).sum::<f64>() / len as f64;
                        let scale = 1.0 / (ms + 1e-5).sqrt();
                        row.iter()
                            .zip(&alpha)
                            .map(|(v, &a)| v * scale * f64::from(a))
                            .collect()
                    };
                    for (i, w) in want.iter().enumerate() {
                        let g = f64::from(got[r * len + i]);
                        assert!(
                            (g - w).abs() <= 2e-6 * w.abs().max(1e-3),
                            "{} {name} {schedule:?} row {r} [{i}]: {g} against {w}",
                            arch.name()
                        );
                    }
                }
                ran += 1;
            }
        }
    }
    println!(
        "AMD tier: {ran} softmax and rms_norm runs in the emulator equal f64 to f32's rounding"
    );
}

/// `where_u8_f32` (ternary.hip: out = cond ? t : f, f broadcast along rows) and `affine_f32`
/// (unary.hip: x * mul + add, both rounded to the dtype first), against the host.
#[test]
fn where_and_affine_run_in_the_emulator() {
    use amdgpu_emu::exec::Memory;
    let (rows, cols) = (23usize, 41usize);
    let n = rows * cols;
    let cond: Vec<u8> = (0..n).map(|i| ((i * 7) % 3 == 0) as u8).collect();
    let t: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let f: Vec<f32> = (0..cols).map(|i| -(i as f32)).collect();
    let contiguous = rocm_kernels::KernelLayout::new(&[rows, cols], &[cols, 1], 0).unwrap();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("ternary", arch);
        let k = co.kernel("where_u8_f32").unwrap();
        let mut mem = Memory::new();
        let (pc, pt, pf) = (
            mem.upload(&cond),
            mem.upload(bytemuck::cast_slice(&t)),
            mem.upload(bytemuck::cast_slice(&f)),
        );
        let out = mem.alloc(4 * n);
        let params = rocm_kernels::ternary::WhereParams {
            cond: ptr(pc),
            t: ptr(pt),
            f: ptr(pf),
            out: ptr(out),
            n: n as u64,
            lc: contiguous,
            lt: contiguous,
            lf: rocm_kernels::KernelLayout::new(&[rows, cols], &[0, 1], 0).unwrap(),
        };
        let got = run_f32(&co, k, &params, &mut mem, (out, n));
        for (i, g) in got.iter().enumerate() {
            let want = if cond[i] != 0 { t[i] } else { f[i % cols] };
            assert_eq!(g.to_bits(), want.to_bits(), "{} where [{i}]", arch.name());
        }
        ran += 1;

        let co = loaded("unary", arch);
        let k = co.kernel("affine_f32").unwrap();
        let mut mem = Memory::new();
        let x = mem.upload(bytemuck::cast_slice(&t));
        let out = mem.alloc(4 * n);
        let (mul, add) = (1.7f64, -3.25f64);
        let params = rocm_kernels::unary::AffineParams {
            input: ptr(x),
            out: ptr(out),
            n: n as u64,
            l: contiguous,
            mul,
            add,
        };
        let got = run_f32(&co, k, &params, &mut mem, (out, n));
        for (i, g) in got.iter().enumerate() {
            let want = t[i] * mul as f32 + add as f32;
            let fused = t[i].mul_add(mul as f32, add as f32);
            assert!(
                g.to_bits() == want.to_bits() || g.to_bits() == fused.to_bits(),
                "{} affine [{i}]: {g} against {want}",
                arch.name()
            );
        }
        ran += 1;
    }
    println!("AMD tier: {ran} where/affine runs in the emulator equal the host's");
}

/// Rotary embeddings (rope.hip: `rope_i` interleaved pairs, `rope` halves) of f32, aligned so
/// the 16-byte paths run and misaligned so the element paths do, against the host.
#[test]
fn rotary_embeddings_run_in_the_emulator() {
    use amdgpu_emu::exec::Memory;
    let (b, h, t, d) = (2usize, 3usize, 5usize, 8usize);
    let n = b * h * t * d;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0)
        .collect();
    let cos: Vec<f32> = (0..t * d / 2).map(|i| (i as f32 * 0.3).cos()).collect();
    let sin: Vec<f32> = (0..t * d / 2).map(|i| (i as f32 * 0.3).sin()).collect();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("rope", arch);
        for (variant, skew) in [("rope_i", 0usize), ("rope_i", 1), ("rope", 0), ("rope", 1)] {
            let name = format!("{variant}_f32");
            let k = co.kernel(&name).unwrap();
            let mut mem = Memory::new();
            let pad = |v: &[f32]| -> Vec<u8> {
                let mut bytes = vec![0u8; 4 * skew];
                bytes.extend_from_slice(bytemuck::cast_slice(v));
                bytes
            };
            let at = |base: u64| base + 4 * skew as u64;
            let px = at(mem.upload(&pad(&x)));
            let pc = at(mem.upload(&pad(&cos)));
            let ps = at(mem.upload(&pad(&sin)));
            let out = at(mem.alloc(4 * (n + skew)));
            let params = rocm_kernels::rope::Params {
                x: ptr(px),
                cos: ptr(pc),
                sin: ptr(ps),
                out: ptr(out),
                d0: b as u64,
                d1: h as u64,
                d2: t as u64,
                d: d as u64,
                cs_batch_stride: 0,
            };
            let got = run_f32(&co, k, &params, &mut mem, (out, n));
            for row in 0..b * h * t {
                let tp = row % t;
                for j in 0..d / 2 {
                    let (i1, i2, c) = if variant == "rope_i" {
                        (row * d + 2 * j, row * d + 2 * j + 1, tp * d / 2 + j)
                    } else {
                        (row * d + j, row * d + j + d / 2, tp * d / 2 + j)
                    };
                    let (x1, x2) = (f64::from(x[i1]), f64::from(x[i2]));
                    let (c, s) = (f64::from(cos[c]), f64::from(sin[c]));
                    let tol = 1e-6 * (x1.abs() + x2.abs());
                    for (i, want) in [(i1, x1 * c - x2 * s), (i2, x1 * s + x2 * c)] {
                        assert!(
                            (f64::from(got[i]) - want).abs() <= tol,
                            "{} {name} skew {skew} [{i}]: {} against {want}",
                            arch.name(),
                            got[i]
                        );
                    }
                }
            }
            ran += 1;
        }
    }
    println!("AMD tier: {ran} rotary embedding runs in the emulator equal the host's");
}

/// A wave's sum by butterfly: the right one starts at half the wavefront, the planted fault at
/// 16 (as if every wavefront had 32 lanes).
const BUTTERFLY: &str = r#"
KERNEL void wave_sum_f32(const float* x, float* out) {
    float v = x[threadIdx.x];
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v += warp_shfl_xor(v, offset);
    out[threadIdx.x] = v;
}
KERNEL void wave_sum32_f32(const float* x, float* out) {
    float v = x[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += warp_shfl_xor(v, offset);
    out[threadIdx.x] = v;
}
"#;

/// A planted fault: a butterfly that stops at 32 lanes. On gfx942 (64 lanes a wave) its
/// lanes hold the sums of their 32-lane halves, not the wave's: the emulator shows it; a
/// 32-lane NVIDIA warp would not. The right butterfly gives the wave's sum on both archs.
#[test]
fn a_32_lane_butterfly_in_a_wave64_kernel_is_caught() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory};
    static MODULE: rocm_kernels::KernelModule = rocm_kernels::KernelModule {
        headers: rocm_kernels::HEADERS,
        name: "butterfly",
        source: BUTTERFLY,
        groups: &[rocm_kernels::EntryGroup {
            ops: &["wave_sum", "wave_sum32"],
            dtypes: &["f32"],
        }],
        params: &[],
    };
    let x: Vec<f32> = (0..64).map(|i| (i + 1) as f32).collect();
    for arch in ARCHS {
        let image = compile_for_arch(Platform::Amd, &MODULE, arch.name(), &[], None)
            .unwrap_or_else(|e| panic!("{}: {e}", arch.name()))
            .image;
        let co = CodeObject::parse(&image).unwrap();
        let lanes = co.kernel("wave_sum_f32").unwrap().wavefront_size as usize;
        let run = |name: &str| -> Vec<f32> {
            let mut mem = Memory::new();
            let px = mem.upload(bytemuck::cast_slice(&x[..lanes]));
            let out = mem.alloc(4 * lanes);
            let mut args = vec![0u8; 16];
            args[..8].copy_from_slice(&px.to_le_bytes());
            args[8..].copy_from_slice(&out.to_le_bytes());
            let launch = Launch {
                grid: [lanes as u32, 1, 1],
                block: [lanes as u32, 1, 1],
                args,
                ..Default::default()
            };
            dispatch(&co, name, &launch, &mut mem)
                .unwrap_or_else(|e| panic!("{} {name}: {e}", arch.name()));
            bytemuck::cast_slice(&mem.download(out, 4 * lanes).unwrap()).to_vec()
        };
        let total: f32 = x[..lanes].iter().sum();
        assert!(
            run("wave_sum_f32").iter().all(|&v| v == total),
            "{}",
            arch.name()
        );
        let planted = run("wave_sum32_f32");
        if lanes == 64 {
            let half: f32 = x[..32].iter().sum();
            assert_eq!(planted[0], half, "{}: the planted butterfly", arch.name());
            assert_ne!(planted[0], total);
            println!(
                "AMD tier: {} the 32-lane butterfly gives {} where the wave's sum is {total}",
                arch.name(),
                planted[0]
            );
        } else {
            assert!(planted.iter().all(|&v| v == total), "{}", arch.name());
        }
    }
}

/// A planted fault: the hidden arguments written 4 bytes past where the metadata puts them
/// (a runtime that reads their offsets wrongly). `fill_f32` then reads its block counts and
/// sizes from the wrong bytes and leaves elements unwritten, writes outside its buffer or
/// never ends (a grid stride of 0): each is caught.
#[test]
fn hidden_arguments_off_by_4_are_caught() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory};
    for arch in ARCHS {
        let mut co = loaded("fill", arch);
        let k = co
            .kernels
            .iter_mut()
            .find(|k| k.name == "fill_f32")
            .unwrap();
        let mut moved = 0;
        for a in k.args.iter_mut() {
            if matches!(a.kind, ArgKind::Hidden(_)) {
                a.offset += 4;
                moved += 1;
            }
        }
        assert!(moved > 0);
        k.kernarg_segment_size += 8;
        let n = 5000usize;
        let mut mem = Memory::new();
        let out = mem.upload(&vec![0u8; 4 * n]);
        let mut args = vec![0u8; 24];
        args[0..8].copy_from_slice(&out.to_le_bytes());
        args[8..12].copy_from_slice(&7.0f32.to_bits().to_le_bytes());
        args[16..24].copy_from_slice(&(n as u64).to_le_bytes());
        let launch = Launch {
            grid: [4 * 256, 1, 1],
            block: [256, 1, 1],
            args,
            // the right launch takes a few hundred instructions a wave
            step_limit: Some(100_000),
            ..Default::default()
        };
        let outcome = dispatch(&co, "fill_f32", &launch, &mut mem);
        let all_written = outcome.is_ok()
            && mem
                .download(out, 4 * n)
                .unwrap()
                .chunks_exact(4)
                .all(|c| c == 7.0f32.to_bits().to_le_bytes());
        assert!(
            !all_written,
            "{}: the shifted hidden arguments went unnoticed",
            arch.name()
        );
        println!(
            "AMD tier: {} fill_f32 with its hidden arguments 4 bytes off: {}",
            arch.name(),
            match outcome {
                Ok(_) => "elements left unwritten".to_string(),
                Err(e) => e.to_string(),
            }
        );
    }
}

/// GGUF blocks on the device: `dequantize_f32_q4_0` and `_q8_0` (quantized.hip, the blocks in
/// rocm-quantized's device layout) against ggml's definitions computed here, bit for bit.
#[test]
fn gguf_blocks_dequantize_in_the_emulator() {
    use amdgpu_emu::exec::Memory;
    use rocm_quantized::{to_device_layout, GgmlType};
    let blocks = 37usize;
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("quantized", arch);
        for (ty, block_bytes) in [(GgmlType::Q4_0, 18usize), (GgmlType::Q8_0, 34)] {
            // ggml's blocks: an f16 scale, then 32 values (4-bit pairs or i8)
            let mut ggml = Vec::with_capacity(blocks * block_bytes);
            let mut want = Vec::with_capacity(blocks * 32);
            for b in 0..blocks {
                let d = half::f16::from_f32(0.01 + b as f32 * 0.37);
                ggml.extend_from_slice(&d.to_bits().to_le_bytes());
                let d = d.to_f32();
                let qs: Vec<u8> = (0..block_bytes - 2)
                    .map(|j| ((b * 131 + j * 29) % 256) as u8)
                    .collect();
                ggml.extend_from_slice(&qs);
                if ty == GgmlType::Q4_0 {
                    let lo = qs.iter().map(|q| (i32::from(q & 0xf) - 8) as f32 * d);
                    let hi = qs.iter().map(|q| (i32::from(q >> 4) - 8) as f32 * d);
                    want.extend(lo.chain(hi));
                } else {
                    want.extend(qs.iter().map(|&q| f32::from(q as i8) * d));
                }
            }
            let name = format!("dequantize_f32_{}", ty.key());
            let k = co.kernel(&name).unwrap();
            let mut mem = Memory::new();
            let w = mem.upload(&to_device_layout(ty, &ggml).unwrap());
            let out = mem.alloc(4 * want.len());
            let params = rocm_kernels::quantized::DequantizeParams {
                w: ptr(w),
                total: blocks as u64,
                first: 0,
                out: ptr(out),
                n: want.len() as u64,
            };
            let got = run_f32(&co, k, &params, &mut mem, (out, want.len()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{} {name} [{i}]", arch.name());
            }
            ran += 1;
        }
    }
    println!("AMD tier: {ran} GGUF dequantize runs in the emulator equal ggml's values");
}

/// GGUF decode's product: activations quantized to q8 (`quantize_q8_f32`, scheme Q8_0), then
/// the integer mat-vec over q4_0 weights (`matvec1_q8_f32_q4_0`: 4-way byte dot products).
/// The q8 bytes against the host's quantization (the rounding of a value on a tie may differ
/// by one step); the products against the host's sums of the device's own q8 bytes and the
/// weights' blocks, to f32's rounding.
#[test]
fn the_quantized_mat_vec_runs_in_the_emulator() {
    use amdgpu_emu::exec::{dispatch, Launch, Memory};
    use rocm_quantized::{to_device_layout, GgmlType};
    let (n, k) = (12usize, 256usize);
    let x: Vec<f32> = (0..k)
        .map(|i| ((i * 37) % 113) as f32 / 20.0 - 2.8)
        .collect();
    // q4_0 weights: per 32 values an f16 scale and 16 bytes of nibble pairs
    let mut ggml = Vec::new();
    let mut scales = Vec::new();
    let mut wq: Vec<i32> = Vec::new();
    for b in 0..n * k / 32 {
        let d = half::f16::from_f32(0.02 + (b % 7) as f32 * 0.011);
        ggml.extend_from_slice(&d.to_bits().to_le_bytes());
        scales.push(f64::from(d.to_f32()));
        let qs: Vec<u8> = (0..16).map(|j| ((b * 53 + j * 97) % 256) as u8).collect();
        ggml.extend_from_slice(&qs);
        wq.extend(qs.iter().map(|q| i32::from(q & 0xf) - 8));
        wq.extend(qs.iter().map(|q| i32::from(q >> 4) - 8));
    }
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("quantized", arch);
        let mut mem = Memory::new();
        let px = mem.upload(bytemuck::cast_slice(&x));
        let xq = mem.alloc(k + k / 32 * 8);
        let q = co.kernel("quantize_q8_f32").unwrap();
        let params = rocm_kernels::quantized::QuantizeQ8Params {
            x: ptr(px),
            out: ptr(xq),
            m: 1,
            k: k as u64,
            scheme: 0,
        };
        let launch = Launch {
            grid: [256, 1, 1],
            block: [256, 1, 1],
            args: kernargs(q, &params),
            ..Default::default()
        };
        dispatch(&co, &q.name, &launch, &mut mem)
            .unwrap_or_else(|e| panic!("{} quantize: {e}", arch.name()));
        let bytes = mem.download(xq, k + k / 32 * 8).unwrap();
        let qx: Vec<i32> = bytes[..k].iter().map(|&b| i32::from(b as i8)).collect();
        let dx: Vec<f64> = (0..k / 32)
            .map(|s| {
                let r = &bytes[k + 8 * s..k + 8 * s + 4];
                f64::from(f32::from_le_bytes([r[0], r[1], r[2], r[3]]))
            })
            .collect();
        for s in 0..k / 32 {
            let block = &x[32 * s..32 * s + 32];
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = half::f16::from_f32(amax / 127.0).to_f32();
            assert_eq!(dx[s], f64::from(d), "{} q8 scale {s}", arch.name());
            for (i, v) in block.iter().enumerate() {
                let want = (v * (1.0 / (amax / 127.0))).round() as i32;
                assert!(
                    (qx[32 * s + i] - want).abs() <= 1,
                    "{} q8 byte {}",
                    arch.name(),
                    32 * s + i
                );
            }
        }
        let w = mem.upload(&to_device_layout(GgmlType::Q4_0, &ggml).unwrap());
        let y = mem.upload(&vec![0xffu8; 4 * n]);
        let mv = co.kernel("matvec1_q8_f32_q4_0").unwrap();
        let params = rocm_kernels::quantized::MatvecQ8Params {
            w: ptr(w),
            total: (n * k / 32) as u64,
            xq: ptr(xq),
            y: ptr(y),
            n: n as u64,
            k: k as u64,
            rows: 1,
            wpr: 1,
        };
        let warps = 256 / mv.wavefront_size as usize;
        let launch = Launch {
            grid: [(n.div_ceil(warps) * 256) as u32, 1, 1],
            block: [256, 1, 1],
            args: kernargs(mv, &params),
            ..Default::default()
        };
        dispatch(&co, &mv.name, &launch, &mut mem)
            .unwrap_or_else(|e| panic!("{} matvec: {e}", arch.name()));
        let got: Vec<f32> = bytemuck::cast_slice(&mem.download(y, 4 * n).unwrap()).to_vec();
        for (row, g) in got.iter().enumerate() {
            let (mut want, mut scale) = (0f64, 0f64);
            for s in 0..k / 32 {
                let b = row * k / 32 + s;
                let dot: i32 = (0..32).map(|i| wq[32 * b + i] * qx[32 * s + i]).sum();
                want += scales[b] * dx[s] * f64::from(dot);
                scale += (scales[b] * dx[s] * f64::from(dot)).abs();
            }
            assert!(
                (f64::from(*g) - want).abs() <= 1e-5 * scale.max(1e-6),
                "{} row {row}: {g} against {want}",
                arch.name()
            );
        }
        ran += 1;
    }
    println!("AMD tier: the q4_0 x q8_0 mat-vec ran in the emulator on {ran} archs and equals the host's integer sums");
}

/// Candle's name of a block type.
fn candle_type(ty: rocm_quantized::GgmlType) -> candle_core::quantized::GgmlDType {
    use candle_core::quantized::GgmlDType as C;
    use rocm_quantized::GgmlType as G;
    match ty {
        G::F32 => C::F32,
        G::F16 => C::F16,
        G::BF16 => C::BF16,
        G::Q4_0 => C::Q4_0,
        G::Q4_1 => C::Q4_1,
        G::Q5_0 => C::Q5_0,
        G::Q5_1 => C::Q5_1,
        G::Q8_0 => C::Q8_0,
        G::Q8_1 => C::Q8_1,
        G::Q2K => C::Q2K,
        G::Q3K => C::Q3K,
        G::Q4K => C::Q4K,
        G::Q5K => C::Q5K,
        G::Q6K => C::Q6K,
        G::Q8K => C::Q8K,
    }
}

/// Every GGUF block type Candle has, quantized by Candle's CPU from random values over a few
/// magnitudes, dequantized by hiprtc's kernel in the emulator (the blocks in rocm-quantized's
/// device layout): bit-equal to Candle's CPU dequantize, on both archs.
#[test]
fn every_block_type_dequantizes_as_candles_cpu() {
    use amdgpu_emu::exec::Memory;
    use rand::{Rng, SeedableRng};
    use rocm_quantized::{to_device_layout, GgmlType};
    let (rows, k) = (3usize, 512usize);
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let v: Vec<f32> = (0..rows * k)
        .map(|i| (rng.random::<f32>() * 2.0 - 1.0) * [0.01f32, 1.0, 30.0][(i / 97) % 3])
        .collect();
    let cpu = candle_core::Tensor::from_vec(v, (rows, k), &candle_core::Device::Cpu).unwrap();
    let mut ran = 0;
    for arch in ARCHS {
        let co = loaded("quantized", arch);
        for ty in GgmlType::ALL {
            let q = candle_core::quantized::QTensor::quantize(&cpu, candle_type(ty)).unwrap();
            let want: Vec<f32> = q
                .dequantize(&candle_core::Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let ggml = q.data().unwrap();
            let name = format!("dequantize_f32_{}", ty.key());
            let k_info = co.kernel(&name).unwrap();
            let mut mem = Memory::new();
            let w = mem.upload(&to_device_layout(ty, &ggml).unwrap());
            let out = mem.alloc(4 * rows * k);
            let params = rocm_kernels::quantized::DequantizeParams {
                w: ptr(w),
                total: (rows * k / ty.block_size()) as u64,
                first: 0,
                out: ptr(out),
                n: (rows * k) as u64,
            };
            let got = run_f32(&co, k_info, &params, &mut mem, (out, rows * k));
            let first = got
                .iter()
                .zip(&want)
                .position(|(g, w)| g.to_bits() != w.to_bits());
            assert_eq!(first, None, "{} {name}: first difference", arch.name());
            ran += 1;
        }
    }
    println!(
        "AMD tier: {ran} block type x arch dequantizes in the emulator bit-equal to Candle's CPU"
    );
}

/// Embedding rows of a Q4_K table picked by u32 ids (`embedding_f32_q4k`): each row Candle's
/// dequantized row, an id past the table a zero row.
#[test]
fn quantized_embedding_picks_rows_in_the_emulator() {
    use amdgpu_emu::exec::Memory;
    use rand::{Rng, SeedableRng};
    use rocm_quantized::{to_device_layout, GgmlType};
    let (rows, k) = (6usize, 256usize);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let v: Vec<f32> = (0..rows * k)
        .map(|_| rng.random::<f32>() * 4.0 - 2.0)
        .collect();
    let cpu = candle_core::Tensor::from_vec(v, (rows, k), &candle_core::Device::Cpu).unwrap();
    let q = candle_core::quantized::QTensor::quantize(&cpu, candle_type(GgmlType::Q4K)).unwrap();
    let table: Vec<f32> = q
        .dequantize(&candle_core::Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let ids: [u32; 6] = [5, 0, 3, 3, 9, 1];
    for arch in ARCHS {
        let co = loaded("quantized", arch);
        let kinfo = co.kernel("embedding_f32_q4k").unwrap();
        let mut mem = Memory::new();
        let t = mem.upload(&to_device_layout(GgmlType::Q4K, &q.data().unwrap()).unwrap());
        let pids = mem.upload(bytemuck::cast_slice(&ids));
        let out = mem.upload(&vec![0xffu8; 4 * ids.len() * k]);
        let params = rocm_kernels::quantized::EmbeddingParams {
            t: ptr(t),
            total: (rows * k / 256) as u64,
            ids: ptr(pids),
            out: ptr(out),
            n_ids: ids.len() as u64,
            rows: rows as u64,
            k: k as u64,
            bad: None,
        };
        let got = run_f32(&co, kinfo, &params, &mut mem, (out, ids.len() * k));
        for (i, &id) in ids.iter().enumerate() {
            let row = &got[i * k..(i + 1) * k];
            if (id as usize) < rows {
                assert_eq!(
                    row,
                    &table[id as usize * k..(id as usize + 1) * k],
                    "{} id {id}",
                    arch.name()
                );
            } else {
                assert!(
                    row.iter().all(|&v| v == 0.0),
                    "{} id {id} past the table",
                    arch.name()
                );
            }
        }
    }
    println!("AMD tier: Q4_K embedding rows in the emulator equal Candle's CPU rows on both archs");
}

/// The folder of rocBLAS's code objects (its Tensile libraries and `Kernels.so-*`):
/// `CANDLE_ROCM_VENDOR_LIBRARY`, else Debian's (the chroot's), else ROCm's.
fn rocblas_library() -> PathBuf {
    if let Some(p) = std::env::var_os("CANDLE_ROCM_VENDOR_LIBRARY") {
        return p.into();
    }
    let rocm =
        std::env::var_os("ROCM_PATH").map_or_else(|| PathBuf::from("/opt/rocm"), PathBuf::from);
    let debian = Path::new("/usr/lib/x86_64-linux-gnu/rocblas");
    let versioned = std::fs::read_dir(debian)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("library"));
    versioned
        .chain([rocm.join("lib/rocblas/library")])
        .find(|p| p.is_dir())
        .expect("rocBLAS's code objects: none found (CANDLE_ROCM_VENDOR_LIBRARY, Debian's rocblas/<version>/library, $ROCM_PATH/lib/rocblas/library)")
}

/// rocBLAS's code objects of `arch`: its compiled kernels and, unless
/// `CANDLE_ROCM_VENDOR_ALL=1` asks for every Tensile library, the smallest of its source
/// (`.hsaco`, the fallback kernels) and of its assembled (`.co`, hand-scheduled) libraries.
fn rocblas_code_objects(arch: &str) -> Vec<PathBuf> {
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(rocblas_library())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            name(p).ends_with(&format!("{arch}.co")) || name(p).ends_with(&format!("{arch}.hsaco"))
        })
        .map(|p| (std::fs::metadata(&p).unwrap().len(), p))
        .collect();
    files.sort();
    let all = std::env::var("CANDLE_ROCM_VENDOR_ALL").is_ok_and(|v| v == "1");
    let (kernels, tensile): (Vec<_>, Vec<_>) = files
        .into_iter()
        .map(|(_, p)| p)
        .partition(|p| name(p).starts_with("Kernels.so"));
    if all {
        return kernels.into_iter().chain(tensile).collect();
    }
    let smallest = |ext: &str| tensile.iter().find(|p| name(p).ends_with(ext)).cloned();
    kernels
        .into_iter()
        .chain(smallest(".hsaco"))
        .chain(smallest(".co"))
        .collect()
}

#[test]
fn rocblas_code_objects_decode_as_llvm_objdump_decodes_them() {
    use amdgpu_emu::decode::print;
    let arch = Arch::Gfx1100;
    let files = rocblas_code_objects(arch.name());
    assert!(
        files.len() >= 3,
        "rocBLAS's {} code objects: {files:?}",
        arch.name()
    );
    let (mut total, mut differ, mut printed) = (0usize, Vec::new(), 0usize);
    let mut text_differ: HashMap<&'static str, (usize, String)> = HashMap::new();
    for path in &files {
        let co = CodeObject::parse(&std::fs::read(path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = &co.image[co.text.0 as usize..co.text.1 as usize];
        let ours: HashMap<u64, Instruction> = decode_all(arch, text, co.text.0)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .into_iter()
            .map(|i| (i.address, i))
            .collect();
        for line in objdump_lines(path, arch) {
            total += 1;
            let inst = ours.get(&line.address);
            let agrees = inst.is_some_and(|i| i.mnemonic == line.mnemonic && i.len == line.len);
            if !agrees && differ.len() < 20 {
                differ.push(format!(
                    "{} {:#x}: llvm-objdump {} ({} bytes), ours {:?}",
                    path.display(),
                    line.address,
                    line.mnemonic,
                    line.len,
                    inst.map(|i| (i.mnemonic, i.len))
                ));
            }
            let Some(inst) = inst else { continue };
            match print::text(arch, inst) {
                Some(t) if t == line.text => printed += 1,
                got => {
                    let e = text_differ
                        .entry(inst.mnemonic)
                        .or_insert_with(|| (0, format!("`{}`, ours {got:?}", line.text)));
                    e.0 += 1;
                }
            }
        }
    }
    println!(
        "AMD tier: {total} instructions of rocBLAS's {} code objects ({} files) decoded as \
         llvm-objdump decodes them ({} differ); {printed} ({:.2}%) printed as it prints them",
        arch.name(),
        files.len(),
        differ.len(),
        100.0 * printed as f64 / total.max(1) as f64
    );
    let mut text_differ: Vec<_> = text_differ.into_iter().collect();
    text_differ.sort_by_key(|(_, (n, _))| std::cmp::Reverse(*n));
    for (mnemonic, (n, example)) in text_differ.iter().take(40) {
        println!("AMD tier: printed otherwise: {mnemonic} x{n}: {example}");
    }
    assert!(total > 10_000, "{total} instructions");
    // boundaries and mnemonics: every instruction
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
