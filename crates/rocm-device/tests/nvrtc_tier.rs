//! The NVRTC compile tier: every kernel module's one-key variants (what the nvidia platform
//! loads) compile for sm_90 through NVRTC (no GPU needed). `cargo xtask test` provides NVRTC
//! from the nvidia-cuda-nvrtc wheel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rocm_device::{compile::compile_for_arch, Platform};
use rocm_kernels as kernels;

/// The defines that restrict a module to its entries of one key (`source_for_dtype`'s).
fn one_key(key: &str) -> Vec<String> {
    vec![
        "-DCANDLE_ROCM_DTYPE_FILTER=1".to_string(),
        format!("-DCANDLE_ROCM_ONLY_{key}=1"),
    ]
}

#[test]
fn one_dtype_variants_compile_through_nvrtc_with_their_keys_entries() {
    // What the nvidia platform loads: each module restricted to one key (dtype or width). A
    // variant exports exactly its key's entries of the module's table (a filter that drops one
    // would fail its launch; the whole modules' tables are the AMD tier's check).
    let version = Platform::Nvidia
        .compiler_version()
        .expect("NVRTC must load in this tier");
    println!("compiler: {version}");
    // NVRTC compiles in parallel threads (the test below checks the images against compiles
    // alone): the variants go to one worker a core, and are checked and reported in order.
    let modules = common::tier_modules();
    let variants: Vec<(&rocm_kernels::KernelModule, &str)> = modules
        .iter()
        .flat_map(|&m| m.filter_keys().into_iter().map(move |k| (m, k)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut compiled: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(module, dtype)) = variants.get(i) else {
                            break mine;
                        };
                        let defines = one_key(dtype);
                        mine.push((
                            i,
                            compile_for_arch(Platform::Nvidia, module, "sm_90", &defines, None),
                        ));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    compiled.sort_by_key(|(i, _)| *i);
    assert_eq!(compiled.len(), variants.len());
    for ((module, dtype), (_, result)) in variants.iter().zip(compiled) {
        let compiled = result.unwrap_or_else(|e| panic!("{} for {dtype}: {e}", module.name));
        assert!(common::is_elf(&compiled.image));
        let mut want: Vec<String> = module
            .groups
            .iter()
            .filter(|g| g.dtypes.contains(dtype))
            .flat_map(|g| g.ops.iter().map(move |op| format!("{op}_{dtype}")))
            .collect();
        want.sort_unstable();
        want.dedup();
        let found = rocm_device::code_object::kernel_symbols(&compiled.image).unwrap();
        assert_eq!(
            found, want,
            "{} for {dtype}: exported against listed",
            module.name
        );
        println!(
            "NVRTC tier: {:>8}.{dtype:<7} {:8} bytes {:6.0} ms",
            module.name,
            compiled.image.len(),
            compiled.elapsed.as_secs_f64() * 1e3
        );
    }
}

/// The kernel cache's entries under `dir`, temporary files included.
fn cache_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(cache_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn compile_fill(dir: &std::path::Path) -> rocm_device::compile::Origin {
    compile_for_arch(Platform::Nvidia, &kernels::FILL, "sm_90", &[], Some(dir))
        .expect("compiling must succeed whatever the cache's state")
        .origin
}

const CHILD_CACHE_ENV: &str = "CANDLE_ROCM_TEST_CHILD_CACHE";

/// Run as a child process by `kernel_cache_faults_recompile_warn_and_go_on`: compiles the
/// fill module through the cache in `$CANDLE_ROCM_TEST_CHILD_CACHE` (nothing without it).
#[test]
fn child_compiles_fill_through_the_cache() {
    if let Ok(dir) = std::env::var(CHILD_CACHE_ENV) {
        let origin = compile_fill(std::path::Path::new(&dir));
        println!("CHILD-ORIGIN {origin:?}");
    }
}

/// Runs `child_compiles_fill_through_the_cache` in another process; `shell_prefix` runs
/// before it in `sh` (e.g. a file-size limit).
fn spawn_child(dir: &std::path::Path, shell_prefix: &str) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{shell_prefix} exec \"$0\" --exact child_compiles_fill_through_the_cache --nocapture"
        ))
        .arg(exe)
        .env(CHILD_CACHE_ENV, dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn child_output(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed: {text}");
    text
}

/// Kernel cache faults never stop a compile: an unwritable folder, a full disk, a truncated
/// or corrupt entry (recompiled and healed), two processes writing one entry at once.
#[test]
fn kernel_cache_faults_recompile_warn_and_go_on() {
    use rocm_device::compile::Origin;
    let root = tempfile::tempdir().unwrap();

    // A folder that cannot be created (its parent is a file): compiles, nothing cached.
    let blocker = root.path().join("a-file");
    std::fs::write(&blocker, b"x").unwrap();
    let unwritable = blocker.join("cache");
    assert_eq!(compile_fill(&unwritable), Origin::Compiled);
    assert_eq!(compile_fill(&unwritable), Origin::Compiled);

    // A read-only folder (root may still write there: either way the compile succeeds and
    // whatever was written is a valid entry).
    let read_only = root.path().join("read-only");
    std::fs::create_dir_all(&read_only).unwrap();
    let mut perms = std::fs::metadata(&read_only).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&read_only, perms).unwrap();
    assert_eq!(compile_fill(&read_only), Origin::Compiled);
    let again = compile_fill(&read_only);
    let writable = cache_files(&read_only)
        .iter()
        .any(|p| p.extension().is_some());
    assert_eq!(
        again,
        if writable {
            Origin::DiskCache
        } else {
            Origin::Compiled
        }
    );

    // A full disk: no byte can be written (file-size limit 0, SIGXFSZ ignored so the
    // write fails with EFBIG). The child compiles; no entry and no temporary file remain.
    let full = root.path().join("full");
    let text = child_output(spawn_child(&full, "trap '' XFSZ; ulimit -f 0;"));
    assert!(text.contains("CHILD-ORIGIN Compiled"), "{text}");
    assert!(cache_files(&full).is_empty(), "{:?}", cache_files(&full));

    // Truncated and corrupt entries: recompiled, then healed.
    let dir = root.path().join("cache");
    assert_eq!(compile_fill(&dir), Origin::Compiled);
    assert_eq!(compile_fill(&dir), Origin::DiskCache);
    let entry = cache_files(&dir).pop().unwrap();
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(compile_fill(&dir), Origin::Compiled);
    assert_eq!(compile_fill(&dir), Origin::DiskCache);
    let mut flipped = std::fs::read(&entry).unwrap();
    let last = flipped.len() - 1;
    flipped[last] ^= 0xff;
    std::fs::write(&entry, &flipped).unwrap();
    assert_eq!(compile_fill(&dir), Origin::Compiled);
    assert_eq!(compile_fill(&dir), Origin::DiskCache);

    // Two processes compiling the same module into an empty cache at once: both succeed,
    // one valid entry remains, no temporary files.
    let shared = root.path().join("shared");
    let (a, b) = (spawn_child(&shared, ""), spawn_child(&shared, ""));
    for text in [child_output(a), child_output(b)] {
        assert!(text.contains("CHILD-ORIGIN"), "{text}");
    }
    let files = cache_files(&shared);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(compile_fill(&shared), Origin::DiskCache);
}

#[test]
fn one_dtype_variants_compile_in_parallel_threads_as_alone() {
    // What `Device::prepare` and the background compiles do: the f32 variants of the usual
    // modules on two threads at once. The compiler is thread-safe: each image equals the one
    // compiled alone. The times are this machine's (2 cores in CI).
    let wanted: Vec<_> = common::tier_modules()
        .into_iter()
        .filter(|m| {
            rocm_kernels::PREFETCH_MODULES.contains(&m.name) && m.filter_keys().contains(&"f32")
        })
        .collect();
    let compile = |m: &rocm_kernels::KernelModule| {
        let defines = one_key("f32");
        compile_for_arch(Platform::Nvidia, m, "sm_90", &defines, None)
            .unwrap_or_else(|e| panic!("{}: {e}", m.name))
            .image
    };
    let t = std::time::Instant::now();
    let alone: Vec<Vec<u8>> = wanted
        .iter()
        .map(|m| {
            let t = std::time::Instant::now();
            let image = compile(m);
            println!(
                "NVRTC tier: {:>8}.f32 alone {:6.0} ms",
                m.name,
                t.elapsed().as_secs_f64() * 1e3
            );
            image
        })
        .collect();
    let serial = t.elapsed();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t = std::time::Instant::now();
    let mut together: Vec<(usize, Vec<u8>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(m) = wanted.get(i) else {
                            break mine;
                        };
                        mine.push((i, compile(m)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let parallel = t.elapsed();
    together.sort_by_key(|(i, _)| *i);
    assert_eq!(together.len(), alone.len());
    for ((i, image), single) in together.iter().zip(&alone) {
        assert!(image == single, "{}: the image differs", wanted[*i].name);
    }
    println!(
        "NVRTC tier: {} f32 module variants, one thread {:.1} s, two threads {:.1} s ({:.2}x)",
        wanted.len(),
        serial.as_secs_f64(),
        parallel.as_secs_f64(),
        serial.as_secs_f64() / parallel.as_secs_f64()
    );
}

#[test]
fn every_module_compiles_with_emulated_wave64() {
    // compat.h's third target (CANDLE_ROCM_WAVE64_EMULATION): every module's cross-lane code
    // builds against the emulated 64-lane primitives (two variants per module: f32 where it
    // has one, and its last key, such as a GGUF block type; every key of a module of at most
    // three, whose entries differ by key, such as flash attention's matrix-unit forms).
    for module in common::tier_modules() {
        let keys = module.filter_keys();
        let first = if keys.contains(&"f32") {
            "f32"
        } else {
            keys[0]
        };
        let last = keys[keys.len() - 1];
        for key in if keys.len() <= 3 {
            keys.clone()
        } else if first == last {
            vec![first]
        } else {
            vec![first, last]
        } {
            let mut defines = one_key(key);
            defines.push("-DCANDLE_ROCM_WAVE64_EMULATION".to_string());
            let compiled = compile_for_arch(Platform::Nvidia, module, "sm_90", &defines, None)
                .unwrap_or_else(|e| panic!("{} for {key} with wave64 emulation: {e}", module.name));
            assert!(common::is_elf(&compiled.image));
            println!(
                "NVRTC tier, wave64 emulation: {:>8}.{key:<5} {:6.0} ms",
                module.name,
                compiled.elapsed.as_secs_f64() * 1e3
            );
        }
    }
}
