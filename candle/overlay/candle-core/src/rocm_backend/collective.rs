//! Collectives between ROCm devices on Candle tensors (RCCL on AMD, NCCL on NVIDIA through
//! candle-rocm): what tensor-parallel model code calls after a row-parallel layer, in the
//! shape of Candle's `llama_multiprocess` example, without a custom op. One rank a process (or
//! a thread) and a device; rank 0 makes the id, a rendezvous hands it to the others.

use candle_rocm::collective as ccl;

use crate::op::BackpropOp;
use crate::{Device, Result, Shape, Storage, Tensor};

pub use ccl::{ReduceOp, Rendezvous, UniqueId};

fn wrap(e: candle_rocm::collective::RocmCommError) -> crate::Error {
    crate::Error::Rocm(Box::new(e)).bt()
}

fn rocm_device<'a>(device: &'a Device, op: &'static str) -> Result<&'a super::RocmDevice> {
    match device {
        Device::Rocm(d) => Ok(d),
        other => Err(crate::Error::Msg(format!(
            "{op}: collectives need Device::Rocm, got {:?}",
            other.location()
        ))
        .bt()),
    }
}

/// One rank of a group of ROCm devices.
#[derive(Debug)]
pub struct Comm {
    inner: ccl::RocmComm,
    device: Device,
    rocm: super::RocmDevice,
}

impl Comm {
    /// A fresh id for a new group (rank 0 makes it).
    pub fn unique_id(device: &Device) -> Result<UniqueId> {
        ccl::RocmComm::unique_id(rocm_device(device, "unique_id")?.inner()).map_err(wrap)
    }

    /// Joins group `id` as `rank` of `size` on `device`; returns once every rank has.
    pub fn new(device: &Device, id: &UniqueId, rank: usize, size: usize) -> Result<Self> {
        let d = rocm_device(device, "comm")?;
        Ok(Self {
            inner: ccl::RocmComm::new(d.inner(), id, rank, size).map_err(wrap)?,
            device: device.clone(),
            rocm: d.clone(),
        })
    }

    /// Rank 0 makes the id, `rendezvous` (`tcp:host:port` or `file:/path`) hands it over,
    /// every rank joins.
    pub fn join(device: &Device, rendezvous: &str, rank: usize, size: usize) -> Result<Self> {
        let d = rocm_device(device, "comm")?;
        let rendezvous: Rendezvous = rendezvous.parse().map_err(wrap)?;
        Ok(Self {
            inner: ccl::RocmComm::join(d.inner(), &rendezvous, rank, size).map_err(wrap)?,
            device: device.clone(),
            rocm: d.clone(),
        })
    }

    pub fn rank(&self) -> usize {
        self.inner.rank()
    }

    pub fn size(&self) -> usize {
        self.inner.size()
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The candle-rocm communicator underneath.
    pub fn inner(&self) -> &ccl::RocmComm {
        &self.inner
    }

    /// Waits for the collectives queued so far (an error if the group was aborted).
    pub fn wait(&self) -> Result<()> {
        self.inner.wait().map_err(wrap)
    }

    /// `f` with `t`'s storage on this communicator's device.
    fn with_storage<T>(
        &self,
        op: &'static str,
        t: &Tensor,
        f: impl FnOnce(&super::RocmStorage, &crate::Layout) -> Result<T>,
    ) -> Result<T> {
        if !t.device().same_device(&self.device) {
            return Err(crate::Error::DeviceMismatchBinaryOp {
                lhs: self.device.location(),
                rhs: t.device().location(),
                op,
            }
            .bt());
        }
        let (storage, layout) = t.storage_and_layout();
        match &*storage {
            Storage::Rocm(s) => f(s, layout),
            _ => Err(crate::Error::Msg(format!("{op}: the tensor is not on a ROCm device")).bt()),
        }
    }

    /// `t = op(t over the ranks)`, in place (`t` contiguous).
    pub fn all_reduce_(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        self.with_storage("all_reduce", t, |s, l| {
            self.inner
                .all_reduce_(s.inner(), &super::layout(l), op)
                .map_err(wrap)
        })
    }

    /// `op(t over the ranks)` as a new tensor.
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let out = t.copy()?;
        self.all_reduce_(&out, op)?;
        Ok(out)
    }

    /// `t = t of root`, in place on every rank (`t` contiguous).
    pub fn broadcast_(&self, t: &Tensor, root: usize) -> Result<()> {
        self.with_storage("broadcast", t, |s, l| {
            self.inner
                .broadcast_(s.inner(), &super::layout(l), root)
                .map_err(wrap)
        })
    }

    /// Every rank's `t` stacked along dim 0 in rank order: `(size * d0, ...)`.
    pub fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.contiguous()?;
        let mut dims = t.dims().to_vec();
        if dims.is_empty() {
            dims.push(1);
        }
        dims[0] *= self.size();
        let storage = self.with_storage("all_gather", &t, |s, l| {
            self.inner
                .all_gather(s.inner(), &super::layout(l))
                .map_err(wrap)
        })?;
        Ok(self.tensor(storage, dims))
    }

    /// This rank's block along dim 0 of `op(t over the ranks)`: `(d0 / size, ...)`.
    pub fn reduce_scatter(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let t = t.contiguous()?;
        let mut dims = t.dims().to_vec();
        match dims.first_mut() {
            Some(d0) if *d0 % self.size() == 0 => *d0 /= self.size(),
            _ => {
                return Err(crate::Error::Msg(format!(
                    "reduce_scatter: dim 0 of {:?} does not split into {} ranks",
                    t.dims(),
                    self.size()
                ))
                .bt())
            }
        }
        let storage = self.with_storage("reduce_scatter", &t, |s, l| {
            self.inner
                .reduce_scatter(s.inner(), &super::layout(l), op)
                .map_err(wrap)
        })?;
        Ok(self.tensor(storage, dims))
    }

    fn tensor(&self, storage: candle_rocm::RocmStorage, dims: Vec<usize>) -> Tensor {
        crate::tensor::from_storage(
            Storage::Rocm(self.rocm.wrap_storage(storage)),
            Shape::from(dims),
            BackpropOp::none(),
            false,
        )
    }
}
