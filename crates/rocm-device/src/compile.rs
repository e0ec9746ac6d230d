//! Kernel compilation with an on-disk cache.
//!
//! Key = SHA-256 of (platform, arch, compiler version, options, full source); the full source
//! already holds compat.h. Entries live at `<cache dir>/<arch>/<key>.bin`, written to a
//! temporary file and renamed (atomic), with a checksum header so a truncated or corrupt
//! entry is detected and recompiled. Any cache fault only warns: compiling still works.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::platform::Platform;

const MAGIC: &[u8; 8] = b"CRKCACH1";

/// Everything that decides a compiled image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileRequest<'a> {
    pub platform: Platform,
    pub module: &'a str,
    pub source: &'a str,
    pub arch: &'a str,
    pub options: Vec<String>,
    pub compiler_version: String,
}

impl CompileRequest<'_> {
    /// Hex SHA-256 over every input that changes the output (not the module's name).
    pub fn cache_key(&self) -> String {
        let mut h = Sha256::new();
        // Length-prefix each field so no two field splits hash alike.
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(self.platform.as_str().as_bytes());
        field(self.arch.as_bytes());
        field(self.compiler_version.as_bytes());
        for o in &self.options {
            field(o.as_bytes());
        }
        field(self.source.as_bytes());
        hex(&h.finalize())
    }

    /// Where the entry lives under `dir`.
    pub fn cache_path(&self, dir: &Path) -> PathBuf {
        let arch: String = self
            .arch
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_-+:.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        dir.join(arch).join(format!("{}.bin", self.cache_key()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How a module was obtained, for the compile statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Compiled,
    DiskCache,
}

/// A compiled image and how long it took to get it.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub image: Vec<u8>,
    pub origin: Origin,
    pub elapsed: Duration,
}

/// Modules asked for and done in the current burst of compiles; a burst that has taken over a
/// second reports "compiling kernels for <arch>: done/total" (at most once a second, and at
/// its end) through `tracing` at info when a subscriber is set, else on stderr.
#[derive(Debug, Default)]
pub struct CompileProgress {
    state: std::sync::Mutex<ProgressState>,
}

#[derive(Debug, Default)]
struct ProgressState {
    total: usize,
    done: usize,
    since: Option<Instant>,
    reported: Option<Instant>,
}

impl CompileProgress {
    /// `n` more modules to compile (a new burst when the last one had ended).
    pub fn add(&self, n: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.done >= s.total {
            *s = ProgressState {
                since: Some(Instant::now()),
                ..ProgressState::default()
            };
        }
        s.total += n;
    }

    /// One module (`module`, named in the report) done; reports when the burst is slow.
    pub fn finish(&self, arch: &str, module: &str) {
        let line = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.done += 1;
            let now = Instant::now();
            let slow = s.since.is_some_and(|t| now - t >= Duration::from_secs(1));
            let due = s.reported.is_none_or(|t| now - t >= Duration::from_secs(1));
            if !(slow && (due || s.done >= s.total)) {
                return;
            }
            s.reported = Some(now);
            let secs = s.since.map_or(0.0, |t| (now - t).as_secs_f64());
            format!(
                "compiling kernels for {arch}: {}/{} ({secs:.1} s; {module})",
                s.done.min(s.total),
                s.total
            )
        };
        if tracing::dispatcher::has_been_set() {
            tracing::info!("{line}");
        } else {
            eprintln!("candle-rocm: {line}");
        }
    }

    /// (done, total) of the current burst.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.done, s.total)
    }
}

/// Reads a cache entry; `None` if absent, truncated or corrupt.
pub fn read_entry(path: &Path) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    if data.len() < MAGIC.len() + 32 || &data[..MAGIC.len()] != MAGIC {
        return None;
    }
    let (sum, payload) = data[MAGIC.len()..].split_at(32);
    (Sha256::digest(payload).as_slice() == sum).then(|| payload.to_vec())
}

/// Writes a cache entry atomically (temporary file in the same folder, then rename).
pub fn write_entry(path: &Path, image: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let (tmp, mut file) = tempfile_in(dir)?;
    let written = (|| {
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(image))?;
        file.write_all(image)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    // A full disk or a refused rename leaves no partial file behind.
    written.inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!(".tmp-{}-{n}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// Compiles `req`, through the disk cache in `cache_dir` when given.
pub fn compile_cached(req: &CompileRequest<'_>, cache_dir: Option<&Path>) -> Result<Compiled> {
    let start = Instant::now();
    let path = cache_dir.map(|d| req.cache_path(d));
    if let Some(path) = &path {
        if let Some(image) = read_entry(path) {
            tracing::debug!(module = req.module, arch = req.arch, "kernel cache hit");
            return Ok(Compiled {
                image,
                origin: Origin::DiskCache,
                elapsed: start.elapsed(),
            });
        }
        if path.exists() {
            tracing::warn!(path = %path.display(), "corrupt kernel cache entry: recompiling");
        }
    }
    let span = tracing::debug_span!("compile", module = req.module, arch = req.arch);
    let _enter = span.enter();
    let image = req
        .platform
        .compile(req.module, req.source, req.arch, &req.options)?;
    let elapsed = start.elapsed();
    tracing::debug!(
        ms = elapsed.as_millis() as u64,
        bytes = image.len(),
        "compiled"
    );
    if let Some(path) = &path {
        if let Err(e) = write_entry(path, &image) {
            tracing::warn!(path = %path.display(), "kernel cache not written: {e}");
        }
    }
    Ok(Compiled {
        image,
        origin: Origin::Compiled,
        elapsed,
    })
}

/// Compiles a kernel module for an explicit arch, no device needed (the AMD tier compiles
/// for gfx90a/gfx942/gfx1100/gfx1201 this way). `extra` options follow the platform's base
/// options.
pub fn compile_for_arch(
    platform: Platform,
    module: &crate::kernel::KernelModule,
    arch: &str,
    extra: &[String],
    cache_dir: Option<&Path>,
) -> Result<Compiled> {
    let source = module.full_source();
    let mut options = platform.base_compile_options(arch);
    options.extend_from_slice(extra);
    let req = CompileRequest {
        platform,
        module: module.name,
        source: &source,
        arch,
        options,
        compiler_version: platform.compiler_version()?,
    };
    compile_cached(&req, cache_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(source: &'a str, arch: &'a str) -> CompileRequest<'a> {
        CompileRequest {
            platform: Platform::Amd,
            module: "m",
            source,
            arch,
            options: vec!["-O3".into()],
            compiler_version: "hiprtc 6.4".into(),
        }
    }

    #[test]
    fn cache_keys_are_stable_and_sensitive_to_every_input() {
        let base = req("kernel", "gfx942");
        assert_eq!(base.cache_key(), req("kernel", "gfx942").cache_key());
        assert_eq!(base.cache_key().len(), 64);
        let mut variants = vec![
            req("kernel ", "gfx942"),
            req("kernel", "gfx90a"),
            CompileRequest {
                options: vec!["-O2".into()],
                ..req("kernel", "gfx942")
            },
            CompileRequest {
                options: vec![],
                ..req("kernel", "gfx942")
            },
            CompileRequest {
                compiler_version: "hiprtc 6.3".into(),
                ..req("kernel", "gfx942")
            },
            CompileRequest {
                platform: Platform::Nvidia,
                ..req("kernel", "gfx942")
            },
        ];
        // Field boundaries matter: moving text between fields changes the key.
        variants.push(CompileRequest {
            options: vec!["-O".into(), "3".into()],
            ..req("kernel", "gfx942")
        });
        for v in &variants {
            assert_ne!(v.cache_key(), base.cache_key(), "{v:?}");
        }
        // The module name is a label, not an input.
        assert_eq!(
            CompileRequest {
                module: "other",
                ..req("kernel", "gfx942")
            }
            .cache_key(),
            base.cache_key()
        );
    }

    #[test]
    fn cache_paths_sit_under_the_arch_folder() {
        let dir = Path::new("/c");
        let p = req("k", "gfx942:sramecc+:xnack-").cache_path(dir);
        assert!(
            p.starts_with("/c/gfx942:sramecc+:xnack-"),
            "{}",
            p.display()
        );
        let p = req("k", "../evil").cache_path(dir);
        assert!(
            p.starts_with("/c/.._evil"),
            "no path escapes the cache: {}",
            p.display()
        );
    }

    #[test]
    fn entries_round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("x.bin");
        assert_eq!(read_entry(&path), None);
        let image: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        write_entry(&path, &image).unwrap();
        assert_eq!(read_entry(&path).as_deref(), Some(&image[..]));

        let full = std::fs::read(&path).unwrap();
        std::fs::write(&path, &full[..full.len() - 1]).unwrap(); // truncated
        assert_eq!(read_entry(&path), None);
        let mut flipped = full.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::write(&path, b"CRK").unwrap();
        assert_eq!(read_entry(&path), None);
        // Rewriting over a corrupt entry heals it, leaving no temporary files.
        write_entry(&path, &image).unwrap();
        assert_eq!(read_entry(&path).as_deref(), Some(&image[..]));
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn compile_progress_counts_bursts() {
        let p = CompileProgress::default();
        p.add(3);
        p.finish("sm_90", "fill_f32");
        assert_eq!(p.counts(), (1, 3));
        p.add(1); // joins the running burst
        assert_eq!(p.counts(), (1, 4));
        for _ in 0..3 {
            p.finish("sm_90", "fill_f32");
        }
        assert_eq!(p.counts(), (4, 4));
        p.add(2); // the burst had ended: a new one
        assert_eq!(p.counts(), (0, 2));
    }

    #[test]
    fn an_unwritable_cache_is_reported_by_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"x").unwrap();
        // A folder path that runs through a regular file cannot be created.
        assert!(write_entry(&blocker.join("sub").join("x.bin"), b"img").is_err());
    }
}
