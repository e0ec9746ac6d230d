//! One loader for every vendor library: where a library is looked for, the typed error when it
//! or one of its symbols is missing, and [`ffi_table!`](crate::ffi_table), the one way a table
//! of its functions is declared and resolved.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// The libraries this process has opened, by the path they were opened by: [`find_library`]
/// keeps what it opens here and [`Library::load`] takes it from here, so a library's
/// initialisers run once (a vendor runtime's set-up is not cheap, and unloading one while its
/// threads run is not safe). They stay loaded for the life of the process.
fn opened() -> &'static Mutex<HashMap<String, Arc<libloading::Library>>> {
    static OPENED: OnceLock<Mutex<HashMap<String, Arc<libloading::Library>>>> = OnceLock::new();
    OPENED.get_or_init(Default::default)
}

/// The library at `path`, opened once per process.
fn open(path: &str) -> Result<Arc<libloading::Library>, libloading::Error> {
    let mut opened = opened().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = opened.get(path) {
        return Ok(l.clone());
    }
    // SAFETY: loading a vendor runtime library runs its initialisers; these are the libraries
    // the platform uses, opened once and never closed.
    let library = Arc::new(unsafe { libloading::Library::new(path) }?);
    opened.insert(path.to_string(), library.clone());
    Ok(library)
}

/// A vendor library that could not be loaded, or that lacks a function of its table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{library} could not be loaded ({tried}); {hint}")]
pub struct LibraryMissing {
    /// What it is for (`rocBLAS (librocblas)`, ...).
    pub library: &'static str,
    /// The files tried, or the symbol that was not found.
    pub tried: String,
    /// How to install it.
    pub hint: &'static str,
}

/// Whether one library was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryStatus {
    /// What it is for (`HIP runtime`, `NVRTC`, ...).
    pub role: &'static str,
    /// The file that was loaded, or `None`.
    pub found: Option<String>,
    /// The names tried, for the message when none loaded.
    pub tried: Vec<String>,
    /// How to install it.
    pub hint: &'static str,
}

impl LibraryStatus {
    /// `Ok` if found, else the typed error naming it and how to install it.
    pub fn require(&self) -> Result<(), LibraryMissing> {
        match self.found {
            Some(_) => Ok(()),
            None => Err(LibraryMissing {
                library: self.role,
                tried: self.tried.join(", "),
                hint: self.hint,
            }),
        }
    }
}

/// The folders ROCm's libraries are looked for in before the loader's own path:
/// `$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib`.
pub fn rocm_library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["ROCM_PATH", "HIP_PATH"]
        .into_iter()
        .filter_map(std::env::var_os)
        .map(|p| PathBuf::from(p).join("lib"))
        .collect();
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    dirs
}

/// Looks for a library under `dirs` by each of `names`, then by the loader's own path.
pub fn find_library(
    role: &'static str,
    names: &[String],
    dirs: &[PathBuf],
    hint: &'static str,
) -> LibraryStatus {
    let mut tried = Vec::new();
    let candidates = dirs
        .iter()
        .flat_map(|dir| names.iter().map(move |n| dir.join(n).display().to_string()))
        .chain(names.iter().cloned());
    for candidate in candidates {
        if open(&candidate).is_ok() {
            return LibraryStatus {
                role,
                found: Some(candidate),
                tried,
                hint,
            };
        }
        tried.push(candidate);
    }
    LibraryStatus {
        role,
        found: None,
        tried,
        hint,
    }
}

/// A loaded vendor library: kept alive by the function table resolved from it.
pub struct Library {
    role: &'static str,
    hint: &'static str,
    path: String,
    library: Arc<libloading::Library>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.role, self.path)
    }
}

impl Library {
    /// The library `status` found (opened when it was found; opened now if it was not).
    pub fn load(status: &LibraryStatus) -> Result<Self, LibraryMissing> {
        status.require()?;
        let path = status.found.clone().unwrap_or_default();
        let library = open(&path).map_err(|e| LibraryMissing {
            library: status.role,
            tried: format!("{path}: {e}"),
            hint: status.hint,
        })?;
        Ok(Library {
            role: status.role,
            hint: status.hint,
            path,
            library,
        })
    }

    /// What the library is for.
    pub fn role(&self) -> &'static str {
        self.role
    }

    /// The file that was loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The function `name`, as a value of `T`.
    ///
    /// # Safety
    /// `T` must be the function pointer type the library's header declares for `name`; the
    /// value must not be called after this library is dropped.
    pub unsafe fn symbol<T: Copy>(&self, name: &str) -> Result<T, LibraryMissing> {
        // SAFETY: the caller guarantees the type (see above).
        unsafe { self.library.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| LibraryMissing {
                library: self.role,
                tried: format!("symbol {name} in {}: {e}", self.path),
                hint: self.hint,
            })
    }
}

/// Declares a library's table of functions once: a struct with one field per function (the
/// types of its header), `SYMBOLS` (every name, for the AMD tier), and `load`/`resolve`, which
/// find every function together and keep the library loaded as long as the table lives:
///
/// ```text
/// rocm_device::ffi_table! {
///     /// rocBLAS's functions.
///     pub struct RocBlas {
///         create_handle = "rocblas_create_handle": fn(*mut Handle) -> i32;
///     }
/// }
/// ```
#[macro_export]
macro_rules! ffi_table {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$fmeta:meta])* $field:ident = $symbol:literal: fn($($arg:ty),* $(,)?) -> $ret:ty;)*
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$fmeta])* pub $field: unsafe extern "C" fn($($arg),*) -> $ret,)*
            library: $crate::sys::library::Library,
        }

        impl $name {
            /// Every function of the table, in declaration order.
            pub const SYMBOLS: &'static [&'static str] = &[$($symbol),*];

            /// Resolves every function of the table in `library`, which the table keeps loaded.
            pub fn resolve(
                library: $crate::sys::library::Library,
            ) -> ::std::result::Result<Self, $crate::sys::library::LibraryMissing> {
                Ok(Self {
                    $($field: {
                        // SAFETY: the type is the one the header declares for the symbol (the
                        // table above spells it out), and the table owns the library.
                        unsafe { library.symbol($symbol)? }
                    },)*
                    library,
                })
            }

            /// Loads the library `status` found and resolves the table in it.
            pub fn load(
                status: &$crate::sys::library::LibraryStatus,
            ) -> ::std::result::Result<Self, $crate::sys::library::LibraryMissing> {
                Self::resolve($crate::sys::library::Library::load(status)?)
            }

            /// The library the functions come from.
            pub fn library(&self) -> &$crate::sys::library::Library {
                &self.library
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(
                    f,
                    "{}({} functions from {:?})",
                    stringify!($name),
                    Self::SYMBOLS.len(),
                    self.library
                )
            }
        }
    };
}

#[cfg(test)]
mod tests {
    // The test tables are resolved, not every function of them called.
    #![allow(clippy::unwrap_used, dead_code)]
    use super::*;

    #[test]
    fn a_missing_library_names_itself_and_the_fix() {
        let status = find_library(
            "test runtime",
            &["libdefinitely-not-here-candle-rocm.so".to_string()],
            &[PathBuf::from("/nonexistent")],
            "install the test runtime",
        );
        assert!(status.found.is_none());
        assert_eq!(status.tried.len(), 2);
        let err = status.require().unwrap_err().to_string();
        assert!(err.contains("test runtime") && err.contains("install the test runtime"));
        assert!(err.contains("/nonexistent/libdefinitely-not-here-candle-rocm.so"));
        let err = Library::load(&status).unwrap_err();
        assert_eq!(err.library, "test runtime");
    }

    crate::ffi_table! {
        /// Two functions of the C library, which every Linux process has loaded.
        struct LibC {
            abs = "abs": fn(i32) -> i32;
            labs = "labs": fn(i64) -> i64;
        }
    }

    crate::ffi_table! {
        /// A table with a function the C library does not have.
        struct NotLibC {
            abs = "abs": fn(i32) -> i32;
            missing = "candle_rocm_no_such_function": fn() -> i32;
        }
    }

    fn libc() -> LibraryStatus {
        let names = ["libc.so.6".to_string()];
        find_library("C library", &names, &[], "a Linux system has it")
    }

    #[test]
    fn a_table_resolves_every_function_and_calls_them() {
        let table = LibC::load(&libc()).unwrap();
        assert_eq!(LibC::SYMBOLS, &["abs", "labs"]);
        // SAFETY: abs and labs take and return plain integers.
        let (a, l) = unsafe { ((table.abs)(-7), (table.labs)(-9_000_000_000)) };
        assert_eq!((a, l), (7, 9_000_000_000));
        assert!(format!("{table:?}").starts_with("LibC(2 functions from C library at "));
    }

    #[test]
    fn a_missing_function_is_a_typed_error_naming_it() {
        let err = NotLibC::load(&libc()).unwrap_err();
        assert_eq!(err.library, "C library");
        assert!(err.tried.contains("candle_rocm_no_such_function"), "{err}");
    }
}
