//! The one run-time configuration of candle-rocm: every knob the environment can set, read
//! once per process ([`Config::global`]) or built in code and given to a device
//! ([`crate::Device::with_config`]). The op crates read their options from the device's copy.

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
/// `1`: out-of-range ids are an error.
pub const CHECK_INDICES_ENV: &str = "CANDLE_ROCM_CHECK_INDICES";
/// `1`: convolutions take the portable path even where MIOpen loads.
pub const DISABLE_MIOPEN_ENV: &str = "CANDLE_ROCM_DISABLE_MIOPEN";
/// `1`: MIOpen's find mode (benchmarks the solutions) instead of immediate mode.
pub const MIOPEN_FIND_ENV: &str = "CANDLE_ROCM_MIOPEN_FIND";
/// Comma list of `f16`, `bf16`, `f32`: gemms of these dtypes may use reduced precision.
pub const REDUCED_PRECISION_ENV: &str = "CANDLE_ROCM_GEMM_REDUCED_PRECISION";
/// `1` (nvidia platform): emulated 64-lane wavefronts, two hardware warps each, with AMD's
/// cross-lane semantics (the verification mode of the wave64 kernels).
pub const WAVE64_EMULATION_ENV: &str = "CANDLE_ROCM_WAVE64_EMULATION";
/// `1` (amd platform): the HIP runtime underneath is the project's shim over CUDA (shim/, the
/// `--amd-shim` verification mode): the BLAS is cuBLAS on the same streams and MIOpen is off.
pub const HIP_ON_CUDA_ENV: &str = "CANDLE_ROCM_HIP_ON_CUDA";
/// Threads that compile kernel modules (`0`: none in the background, only what a launch needs,
/// on its own thread); default: the machine's cores.
pub const COMPILE_THREADS_ENV: &str = "CANDLE_ROCM_COMPILE_THREADS";

/// Seconds a collective (rocm-ccl) may make no progress before its communicator is aborted.
pub const CCL_TIMEOUT_ENV: &str = "CANDLE_ROCM_CCL_TIMEOUT";

/// Every variable [`Config::from_env`] reads, for documentation and tests.
pub const ENV_VARS: [&str; 13] = [
    PLATFORM_ENV,
    CACHE_DIR_ENV,
    DISABLE_KERNEL_CACHE_ENV,
    SYNC_LAUNCH_ENV,
    POOL_MAX_CACHED_ENV,
    CHECK_INDICES_ENV,
    DISABLE_MIOPEN_ENV,
    MIOPEN_FIND_ENV,
    REDUCED_PRECISION_ENV,
    COMPILE_THREADS_ENV,
    WAVE64_EMULATION_ENV,
    HIP_ON_CUDA_ENV,
    CCL_TIMEOUT_ENV,
];

/// Reduced-precision gemm opt-ins (f16 accumulation, the BLAS's fast bf16, TF32).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReducedPrecision {
    pub f16: bool,
    pub bf16: bool,
    pub f32: bool,
}

/// The run-time configuration. `Default` is what an empty environment gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `None`: amd when a HIP device exists, else nvidia.
    pub platform: Option<Platform>,
    /// `None`: no disk cache.
    pub kernel_cache_dir: Option<PathBuf>,
    pub sync_launch: bool,
    pub pool_max_cached_bytes: usize,
    pub check_indices: bool,
    pub use_miopen: bool,
    pub miopen_find: bool,
    pub reduced_precision: ReducedPrecision,
    /// Kernel compiles at once ([`crate::Device::prepare`], and the background compiles when a
    /// dtype is first used; 0 turns the latter off).
    pub compile_threads: usize,
    /// Emulated 64-lane wavefronts on the nvidia platform (refused on amd, whose wavefronts
    /// are real).
    pub wave64_emulation: bool,
    /// The amd platform runs on the HIP shim over CUDA: cuBLAS serves the BLAS, and MIOpen is
    /// off (`use_miopen` false), as neither vendor library exists there.
    pub hip_on_cuda: bool,
    /// How long a collective may make no progress (a peer died or stopped calling) before
    /// its communicator is aborted and every rank's call returns an error.
    pub ccl_timeout: std::time::Duration,
}

/// The default of `Config::ccl_timeout`: long enough for a first kernel compile or a slow peer.
const DEFAULT_CCL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

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
            check_indices: false,
            use_miopen: true,
            miopen_find: false,
            reduced_precision: ReducedPrecision::default(),
            compile_threads: cores(),
            wave64_emulation: false,
            hip_on_cuda: false,
            ccl_timeout: DEFAULT_CCL_TIMEOUT,
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
        let on = |k: &str| lookup(k).is_some_and(|v| v.trim() == "1");
        let non_empty = |k: &str| lookup(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let kernel_cache_dir = if on(DISABLE_KERNEL_CACHE_ENV) {
            None
        } else {
            non_empty(CACHE_DIR_ENV)
                .or_else(|| non_empty("XDG_CACHE_HOME").map(|p| p.join("candle-rocm")))
                .or_else(|| non_empty("HOME").map(|p| p.join(".cache").join("candle-rocm")))
        };
        let reduced = lookup(REDUCED_PRECISION_ENV).unwrap_or_default();
        let has = |d: &str| reduced.split(',').any(|x| x.trim() == d);
        Config {
            platform: lookup(PLATFORM_ENV).and_then(|v| v.parse().ok()),
            kernel_cache_dir,
            sync_launch: on(SYNC_LAUNCH_ENV),
            pool_max_cached_bytes: lookup(POOL_MAX_CACHED_ENV)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(usize::MAX),
            check_indices: on(CHECK_INDICES_ENV),
            use_miopen: !on(DISABLE_MIOPEN_ENV) && !on(HIP_ON_CUDA_ENV),
            miopen_find: on(MIOPEN_FIND_ENV),
            reduced_precision: ReducedPrecision {
                f16: has("f16"),
                bf16: has("bf16"),
                f32: has("f32"),
            },
            compile_threads: lookup(COMPILE_THREADS_ENV)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(cores),
            wave64_emulation: on(WAVE64_EMULATION_ENV),
            hip_on_cuda: on(HIP_ON_CUDA_ENV),
            ccl_timeout: lookup(CCL_TIMEOUT_ENV)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map_or(DEFAULT_CCL_TIMEOUT, std::time::Duration::from_secs_f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<Config> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
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
            (CHECK_INDICES_ENV, "1"),
            (DISABLE_MIOPEN_ENV, "1"),
            (MIOPEN_FIND_ENV, "1"),
            (REDUCED_PRECISION_ENV, "bf16, f32"),
            (COMPILE_THREADS_ENV, " 3 "),
            (WAVE64_EMULATION_ENV, "1"),
            (HIP_ON_CUDA_ENV, "1"),
            (CCL_TIMEOUT_ENV, " 2.5 "),
        ])
        .unwrap();
        assert_eq!(c.compile_threads, 3);
        assert_eq!(c.ccl_timeout, std::time::Duration::from_millis(2500));
        assert_eq!(
            from(&[(CCL_TIMEOUT_ENV, "-1")]).unwrap().ccl_timeout,
            DEFAULT_CCL_TIMEOUT
        );
        assert!(c.wave64_emulation && c.hip_on_cuda);
        assert_eq!(c.platform, Some(Platform::Nvidia));
        assert_eq!(
            c.kernel_cache_dir.as_deref(),
            Some(std::path::Path::new("/c"))
        );
        assert!(c.sync_launch && c.check_indices && !c.use_miopen && c.miopen_find);
        assert_eq!(c.pool_max_cached_bytes, 4096);
        assert_eq!(
            c.reduced_precision,
            ReducedPrecision {
                f16: false,
                bf16: true,
                f32: true
            }
        );
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
                REDUCED_PRECISION_ENV => "f16",
                COMPILE_THREADS_ENV => "0",
                CCL_TIMEOUT_ENV => "30",
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
