//! Collectives on storages (rocm-ccl): what Candle's tensors need for tensor parallelism, in
//! place where the collective allows. Layouts must be contiguous (a view is copied first by
//! the caller, as Candle's `contiguous()` does).

use rocm_ccl::{Comm, Error, Result};
use rocm_device::Layout;

use crate::{RocmDevice, RocmStorage};

pub use rocm_ccl::{default_timeout, Error as RocmCommError, ReduceOp, Rendezvous, UniqueId};

/// A communicator of [`RocmDevice`]s: one rank of a group, on one device.
#[derive(Debug)]
pub struct RocmComm {
    comm: Comm,
    device: RocmDevice,
}

impl RocmComm {
    /// A fresh id for a new group (rank 0 makes it and hands it to the others).
    pub fn unique_id(device: &RocmDevice) -> Result<UniqueId> {
        rocm_ccl::unique_id(device.raw())
    }

    /// Joins group `id` as `rank` of `size` on `device` (returns once every rank has).
    pub fn new(device: &RocmDevice, id: &UniqueId, rank: usize, size: usize) -> Result<Self> {
        Ok(Self {
            comm: Comm::init(device.raw(), id, rank, size, default_timeout())?,
            device: device.clone(),
        })
    }

    /// Rank 0 makes the id, `rendezvous` hands it over, every rank joins.
    pub fn join(
        device: &RocmDevice,
        rendezvous: &Rendezvous,
        rank: usize,
        size: usize,
    ) -> Result<Self> {
        let id = rendezvous.exchange(rank, size, default_timeout(), || Self::unique_id(device))?;
        Self::new(device, &id, rank, size)
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn size(&self) -> usize {
        self.comm.size()
    }

    pub fn device(&self) -> &RocmDevice {
        &self.device
    }

    /// The communicator underneath (every collective of rocm-ccl).
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Waits for the collectives queued so far; an error if the group was aborted.
    pub fn wait(&self) -> Result<()> {
        self.comm.wait()
    }

    fn contiguous(op: &'static str, layout: &Layout) -> Result<()> {
        if layout.is_contiguous() {
            return Ok(());
        }
        Err(Error::InvalidArgument {
            op,
            detail: format!("the tensor is not contiguous (layout {layout:?})"),
        })
    }

    /// `x = op(x over the ranks)`, in place.
    pub fn all_reduce_(&self, x: &RocmStorage, layout: &Layout, op: ReduceOp) -> Result<()> {
        Self::contiguous("all_reduce", layout)?;
        let x = x.operand(layout);
        self.comm.all_reduce(x, x, op)
    }

    /// `x = x of root`, in place on every rank.
    pub fn broadcast_(&self, x: &RocmStorage, layout: &Layout, root: usize) -> Result<()> {
        Self::contiguous("broadcast", layout)?;
        let x = x.operand(layout);
        self.comm.broadcast(x, x, root)
    }

    /// Every rank's `x` in rank order, in a new storage of size x the elements.
    pub fn all_gather(&self, x: &RocmStorage, layout: &Layout) -> Result<RocmStorage> {
        Self::contiguous("all_gather", layout)?;
        let n = layout.elem_count() * self.size();
        let out = self.device.alloc_uninit(n, x.dtype())?;
        let out_layout = Layout::contiguous(&[n]);
        self.comm
            .all_gather(x.operand(layout), out.operand(&out_layout))?;
        Ok(out)
    }

    /// This rank's block of `op(x over the ranks)`: the elements split into size blocks.
    pub fn reduce_scatter(
        &self,
        x: &RocmStorage,
        layout: &Layout,
        op: ReduceOp,
    ) -> Result<RocmStorage> {
        Self::contiguous("reduce_scatter", layout)?;
        let total = layout.elem_count();
        if total % self.size() != 0 {
            return Err(Error::InvalidArgument {
                op: "reduce_scatter",
                detail: format!("{total} elements do not split into {} ranks", self.size()),
            });
        }
        let n = total / self.size();
        let out = self.device.alloc_uninit(n, x.dtype())?;
        let out_layout = Layout::contiguous(&[n]);
        self.comm
            .reduce_scatter(x.operand(layout), out.operand(&out_layout), op)?;
        Ok(out)
    }
}
