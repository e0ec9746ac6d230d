//! The runtime's configuration: the platform, the kernel cache, the pool, the compiles and the
//! verification modes, read from the environment once per process ([`Config::global`]) or
//! built in code and given to a device ([`crate::Device::with_config`]). The op crates own
//! their options (rocm-blas's `BlasOptions`, rocm-indexing's `IndexOptions`, rocm-dnn's
//! `DnnOptions`, rocm-ccl's timeout) and read their variables with [`env_lookup`] and
//! [`flag`], the rules every variable follows.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::error::Result;

use crate::platform::Platform;

/// Forces a platform: `amd` or `nvidia`.
pub const PLATFORM_ENV: &str = "CANDLE_ROCM_PLATFORM";
/// The kernel cache's folder.
pub const CACHE_DIR_ENV: &str = "CANDLE_ROCM_CACHE_DIR";
/// `1`: no kernel cache on disk.
pub const DISABLE_KERNEL_CACHE_ENV: &str = "CANDLE_ROCM_DISABLE_KERNEL_CACHE";
/// `1`: synchronize after every launch.
pub const SYNC_LAUNCH_ENV: &str = "CANDLE_ROCM_SYNC_LAUNCH";
/// Most bytes the memory pool keeps cached.
pub const POOL_MAX_CACHED_ENV: &str = "CANDLE_ROCM_POOL_MAX_CACHED_BYTES";
/// `1` (nvidia platform): emulated 64-lane wavefronts, two hardware warps each, with AMD's
/// cross-lane semantics (the verification mode of the wave64 kernels).
pub const WAVE64_EMULATION_ENV: &str = "CANDLE_ROCM_WAVE64_EMULATION";
/// `1` (amd platform): the HIP runtime underneath is the project's shim over CUDA (shim/, the
/// `--amd-shim` verification mode): the BLAS is cuBLAS on the same streams and MIOpen is off.
pub const HIP_ON_CUDA_ENV: &str = "CANDLE_ROCM_HIP_ON_CUDA";
/// Threads that compile kernel modules (`0`: none in the background, only what a launch needs,
/// on its own thread); default: the machine's cores.
pub const COMPILE_THREADS_ENV: &str = "CANDLE_ROCM_COMPILE_THREADS";

/// Every variable [`Config::from_env`] reads, for documentation and tests.
pub const ENV_VARS: [&str; 8] = [
    PLATFORM_ENV,
    CACHE_DIR_ENV,
    DISABLE_KERNEL_CACHE_ENV,
    SYNC_LAUNCH_ENV,
    POOL_MAX_CACHED_ENV,
    COMPILE_THREADS_ENV,
    WAVE64_EMULATION_ENV,
    HIP_ON_CUDA_ENV,
];

/// The run-time configuration. `Default` is what an empty environment gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `None`: amd when a HIP device exists, else nvidia.
    pub platform: Option<Platform>,
    /// `None`: no disk cache.
    pub kernel_cache_dir: Option<PathBuf>,
    pub sync_launch: bool,
    pub pool_max_cached_bytes: usize,
    /// Kernel compiles at once ([`crate::Device::prepare`], and the background compiles when a
    /// dtype is first used; 0 turns the latter off).
    pub compile_threads: usize,
    /// Emulated 64-lane wavefronts on the nvidia platform (refused on amd, whose wavefronts
    /// are real).
    pub wave64_emulation: bool,
    /// The amd platform runs on the HIP shim over CUDA: cuBLAS serves the BLAS, and MIOpen is
    /// off, as neither vendor library exists there.
    pub hip_on_cuda: bool,
}

/// The machine's cores, the default of `Config::compile_threads`.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for Config {
    fn default() -> Self {
        Config {
            platform: None,
            kernel_cache_dir: None,
            sync_launch: false,
            pool_max_cached_bytes: usize::MAX,
            compile_threads: cores(),
            wave64_emulation: false,
            hip_on_cuda: false,
        }
    }
}

impl Config {
    /// The configuration of this process's environment, read on first call; an error when
    /// `CANDLE_ROCM_PLATFORM` names no platform.
    pub fn global() -> Result<&'static Config> {
        match Self::process() {
            (_, Some(bad)) => Err(crate::Error::InvalidPlatform(bad.clone())),
            (config, None) => Ok(config),
        }
    }

    /// The process's options for a caller that names its platform itself: the environment's
    /// every other field, whatever `CANDLE_ROCM_PLATFORM` holds.
    pub(crate) fn global_options() -> &'static Config {
        &Self::process().0
    }

    /// The environment, read once: its configuration (an unknown platform name left out) and
    /// that name, if any.
    fn process() -> &'static (Config, Option<String>) {
        static PROCESS: OnceLock<(Config, Option<String>)> = OnceLock::new();
        PROCESS.get_or_init(|| {
            let lookup = |k: &str| std::env::var(k).ok();
            let bad = lookup(PLATFORM_ENV)
                .filter(|v| !v.trim().is_empty() && v.parse::<Platform>().is_err());
            (Config::from_lookup_lenient(lookup), bad)
        })
    }

    /// Reads the environment now (errors on an unknown platform name).
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// The configuration `lookup` (a variable name to its value) describes.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::from_lookup_lenient(&lookup);
        c.platform = match lookup(PLATFORM_ENV) {
            Some(v) if !v.trim().is_empty() => Some(v.parse()?),
            _ => None,
        };
        Ok(c)
    }

    fn from_lookup_lenient(lookup: impl Fn(&str) -> Option<String>) -> Config {
        let on = |k: &str| flag(lookup(k));
        let non_empty = |k: &str| lookup(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let kernel_cache_dir = if on(DISABLE_KERNEL_CACHE_ENV) {
            None
        } else {
            non_empty(CACHE_DIR_ENV)
                .or_else(|| non_empty("XDG_CACHE_HOME").map(|p| p.join("candle-rocm")))
                .or_else(|| non_empty("HOME").map(|p| p.join(".cache").join("candle-rocm")))
        };
        Config {
            platform: lookup(PLATFORM_ENV).and_then(|v| v.parse().ok()),
            kernel_cache_dir,
            sync_launch: on(SYNC_LAUNCH_ENV),
            pool_max_cached_bytes: lookup(POOL_MAX_CACHED_ENV)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(usize::MAX),
            compile_threads: lookup(COMPILE_THREADS_ENV)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(cores),
            wave64_emulation: on(WAVE64_EMULATION_ENV),
            hip_on_cuda: on(HIP_ON_CUDA_ENV),
        }
    }
}

/// The process's environment as a lookup (a variable name to its value), the form every
/// options type of the crates reads (`from_lookup`), so tests can hand one in.
pub fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A lookup over fixed (name, value) pairs: an environment for the options types' tests.
pub fn lookup_in<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    |name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    }
}

/// A switch variable's value: on only for `1` (spaces around it ignored).
pub fn flag(value: Option<String>) -> bool {
    value.is_some_and(|v| v.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<Config> {
        Config::from_lookup(lookup_in(pairs))
    }

    #[test]
    fn an_empty_environment_is_the_default_but_for_the_cache_folder() {
        let c = from(&[]).unwrap();
        assert_eq!(c, Config::default());
        let c = from(&[("HOME", "/h")]).unwrap();
        assert_eq!(
            c.kernel_cache_dir.as_deref(),
            Some(std::path::Path::new("/h/.cache/candle-rocm"))
        );
    }

    #[test]
    fn every_variable_is_read() {
        let c = from(&[
            (PLATFORM_ENV, "nvidia"),
            (CACHE_DIR_ENV, "/c"),
            ("XDG_CACHE_HOME", "/x"),
            (SYNC_LAUNCH_ENV, "1"),
            (POOL_MAX_CACHED_ENV, " 4096 "),
            (COMPILE_THREADS_ENV, " 3 "),
            (WAVE64_EMULATION_ENV, "1"),
            (HIP_ON_CUDA_ENV, "1"),
        ])
        .unwrap();
        assert_eq!(c.compile_threads, 3);
        assert!(c.wave64_emulation && c.hip_on_cuda);
        assert_eq!(c.platform, Some(Platform::Nvidia));
        assert_eq!(
            c.kernel_cache_dir.as_deref(),
            Some(std::path::Path::new("/c"))
        );
        assert!(c.sync_launch);
        assert_eq!(c.pool_max_cached_bytes, 4096);
        let off = from(&[(DISABLE_KERNEL_CACHE_ENV, "1"), (CACHE_DIR_ENV, "/c")]).unwrap();
        assert_eq!(off.kernel_cache_dir, None);
        // only "1" switches a flag on
        assert!(!from(&[(SYNC_LAUNCH_ENV, "yes")]).unwrap().sync_launch);
        let xdg = from(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]).unwrap();
        assert_eq!(
            xdg.kernel_cache_dir.as_deref(),
            Some(std::path::Path::new("/x/candle-rocm"))
        );
    }

    #[test]
    fn every_listed_variable_changes_the_configuration() {
        let base = [("HOME", "/h")];
        let plain = from(&base).unwrap();
        for var in ENV_VARS {
            let value = match var {
                PLATFORM_ENV => "nvidia",
                CACHE_DIR_ENV => "/c",
                POOL_MAX_CACHED_ENV => "4096",
                COMPILE_THREADS_ENV => "0",
                _ => "1",
            };
            assert_ne!(from(&[base[0], (var, value)]).unwrap(), plain, "{var}");
        }
    }

    #[test]
    fn an_unknown_platform_is_an_error() {
        assert!(from(&[(PLATFORM_ENV, "tpu")]).is_err());
        assert_eq!(from(&[(PLATFORM_ENV, "  ")]).unwrap().platform, None);
    }
}
