//! Collectives for candle-rocm: RCCL on the amd platform, NCCL on the nvidia platform, both
//! loaded at run time (nothing is linked; a missing library is a typed error naming it).
//!
//! A [`Comm`] is one rank of a group of devices, usually one process per GPU: rank 0 makes a
//! [`UniqueId`], a [`Rendezvous`] hands it to the others (over TCP across machines, or a file
//! on one host), and each rank joins with [`Comm::init`]. Collectives run on the device's
//! stream, ordered with every other op of the device, on any dtype the library can carry
//! (reductions on the ten dtypes but i16 and f8e4m3, which move as bytes). A watchdog thread
//! follows each collective: one that makes no progress within the timeout (a peer died or
//! stopped calling) aborts the communicator, so every later call and [`Comm::wait`] returns
//! an error instead of hanging.
//!
//! ```no_run
//! use std::time::Duration;
//! use rocm_ccl::{Comm, ReduceOp, Rendezvous};
//! use rocm_device::{DType, Device, Layout, Operand};
//! # fn main() -> Result<(), rocm_ccl::Error> {
//! let (rank, size) = (0, 2);
//! let device = Device::new(rank)?;
//! let rendezvous: Rendezvous = "tcp:127.0.0.1:29500".parse()?;
//! let id = rendezvous.exchange(rank, size, Duration::from_secs(60), || rocm_ccl::unique_id(&device))?;
//! let comm = Comm::init(&device, &id, rank, size, rocm_ccl::default_timeout())?;
//! let x = device.htod(&[1.0f32, 2.0, 3.0])?;
//! let layout = Layout::contiguous(&[3]);
//! let op = Operand::new(x.as_buffer(), DType::F32, &layout);
//! comm.all_reduce(op, op, ReduceOp::Sum)?; // in place
//! comm.wait()?;
//! # Ok(()) }
//! ```

mod comm;
mod error;
pub mod library;
mod rendezvous;

pub use comm::{
    default_timeout, timeout_from, unique_id, Comm, ReduceOp, DEFAULT_TIMEOUT, TIMEOUT_ENV,
};
pub use error::{Error, Result};
pub use library::{library_status, CclLib, UniqueId};
pub use rendezvous::Rendezvous;
