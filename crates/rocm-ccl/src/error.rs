//! Errors of the collectives: typed, with the op, dtype, counts and the library's own words.

use rocm_device::DType;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Device(#[from] rocm_device::Error),

    #[error("the collective library is not available: {0}")]
    Unavailable(String),

    #[error("{library} call {call} failed: {name} ({code}){}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Library {
        library: &'static str,
        call: &'static str,
        code: u32,
        name: String,
        message: String,
    },

    #[error("{op}: {dtype} is not supported{why}")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        why: &'static str,
    },

    #[error("{op}: {detail}")]
    InvalidArgument { op: &'static str, detail: String },

    #[error(
        "{op}: rank {rank} of {size} saw no progress for {seconds:.1} s (a peer may have died or \
         stopped calling); the communicator was aborted"
    )]
    Timeout {
        op: &'static str,
        rank: usize,
        size: usize,
        seconds: f64,
    },

    #[error("{op}: the communicator was aborted earlier: {reason}")]
    Aborted { op: &'static str, reason: String },

    #[error("rendezvous ({how}): {detail}")]
    Rendezvous { how: String, detail: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
