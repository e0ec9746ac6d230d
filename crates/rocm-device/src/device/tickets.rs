//! Tickets: device counters, zero between launches, with which a kernel's blocks find the last
//! of them to finish a piece of work (it takes a ticket with an atomic add after its writes,
//! and the block that draws the last number combines what the others wrote, then sets the
//! counter back to zero). One launch then does what a second, combining launch would.

use crate::error::{Error, Result};
use crate::platform::DevicePtr;
use crate::pool::Block;

use super::*;

/// Fewest counters an allocation of tickets holds.
const MIN_TICKETS: usize = 4096;

/// `count` u32 counters on a device, each zero whenever no kernel that uses it is running.
/// The contract of every kernel given them: it leaves each counter it touched at zero.
#[derive(Debug, Clone, Copy)]
pub struct Tickets {
    pub(crate) ptr: DevicePtr,
    pub(crate) count: usize,
    pub(crate) device: usize,
}

impl Tickets {
    /// Counters available.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The first counter's address, as a kernel parameter.
    pub fn ptr(&self) -> crate::kernel::DevicePtr {
        crate::kernel::DevicePtr {
            addr: self.ptr,
            device: self.device,
        }
    }
}

/// Every allocation of counters a device made, from its pool (the newest, largest last). Older
/// ones stay until the device goes: a captured graph may hold their addresses.
#[derive(Default)]
pub(crate) struct TicketStore {
    regions: Vec<(Block, usize)>,
}

impl TicketStore {
    /// The blocks, for the pool to take back.
    pub(crate) fn take(&mut self) -> Vec<Block> {
        self.regions.drain(..).map(|(block, _)| block).collect()
    }
}

impl Device {
    /// At least `count` ticket counters (zero; see [`Tickets`]) on this handle's stream. Kernels
    /// of one handle run in order, so they share one set. The first call, and one asking for
    /// more than any before, allocates and zeroes them (not possible inside a graph capture:
    /// run the work once before capturing it, as the pool needs too).
    pub fn tickets(&self, count: usize) -> Result<Tickets> {
        let mut store = self.inner.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(block, have)) = store.regions.last() {
            if have >= count {
                return Ok(Tickets {
                    ptr: block.ptr,
                    count: have,
                    device: self.id(),
                });
            }
        }
        if self.inner.pool.is_capturing() {
            return Err(Error::Capture(format!(
                "{count} ticket counters are first needed inside a captured closure: run the \
                 work once before capturing it"
            )));
        }
        let have = count.max(MIN_TICKETS).next_power_of_two();
        let bytes = have * 4;
        let block = self.inner.pool.alloc(&self.allocator(), bytes)?;
        store.regions.push((block, have));
        self.inner
            .raw
            .memset_d8(block.ptr, 0, bytes, self.inner.stream.handle)?;
        Ok(Tickets {
            ptr: block.ptr,
            count: have,
            device: self.id(),
        })
    }
}
