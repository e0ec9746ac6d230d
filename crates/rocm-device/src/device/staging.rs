//! Uploads through page-locked staging buffers. A copy from pageable memory makes the driver
//! stage it itself and the host wait for the device; through buffers of our own the host fills
//! one chunk while the device copies the one before, and the call returns once the last chunk
//! is queued, so the host's next work (reading the next tensor of a file) overlaps the copy.

use std::sync::Arc;

use crate::error::Result;
use crate::platform::{AllocFailure, HostPtr, RawDevice};

use super::stream::Event;
use super::*;

/// Bytes a staging buffer holds.
pub(crate) const STAGING_CHUNK: usize = 8 << 20;
/// Staging buffers a device keeps: one filled by the host while the other is copied.
const STAGING_BUFFERS: usize = 2;
/// Copies from the host of at least this many bytes go through the staging buffers; smaller
/// ones are not worth a fill and an event.
pub(crate) const STAGED_MIN_BYTES: usize = 1 << 20;

/// One page-locked buffer and the event that marks the end of the last copy out of it.
pub(crate) struct PinnedChunk {
    raw: Arc<dyn RawDevice>,
    ptr: HostPtr,
    len: usize,
    copied: Event,
    in_flight: bool,
}

impl PinnedChunk {
    fn new(raw: &Arc<dyn RawDevice>, len: usize) -> Result<Option<Self>> {
        let ptr = match raw.host_alloc(len) {
            Ok(ptr) => ptr,
            // page-locked memory is a limited resource: without it uploads stay pageable
            Err(AllocFailure::OutOfMemory) => return Ok(None),
            Err(AllocFailure::Other(e)) => return Err(e),
        };
        let copied = match raw.event_create() {
            Ok(handle) => Event {
                raw: raw.clone(),
                handle,
            },
            Err(e) => {
                let _ = raw.host_free(ptr);
                return Err(e);
            }
        };
        Ok(Some(PinnedChunk {
            raw: raw.clone(),
            ptr,
            len,
            copied,
            in_flight: false,
        }))
    }

    /// The buffer, once the copy out of it (if any) has finished.
    fn writable(&mut self) -> Result<&mut [u8]> {
        if self.in_flight {
            self.copied.synchronize()?;
            self.in_flight = false;
        }
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by this chunk; no copy reads
        // it any more (waited for above), and the borrow of `self` keeps it unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.0 as *mut u8, self.len) })
    }
}

impl Drop for PinnedChunk {
    fn drop(&mut self) {
        let done = if self.in_flight {
            self.copied.synchronize()
        } else {
            Ok(())
        }
        .and_then(|()| self.raw.host_free(self.ptr));
        if let Err(e) = done {
            tracing::warn!("freeing a staging buffer failed: {e}");
        }
    }
}

/// A device's staging buffers, made on the first staged upload.
#[derive(Default)]
pub(crate) struct Staging {
    chunks: Vec<PinnedChunk>,
    next: usize,
    /// Page-locked memory was refused once: uploads stay pageable.
    unavailable: bool,
}

impl Device {
    /// `len` bytes into `dst` from `dst_offset`, each piece written by `fill(offset, bytes)`
    /// (`offset` from the start of the `len`), in chunks of at most [`STAGING_CHUNK`] bytes
    /// through page-locked staging buffers. The copies are queued on the device's stream (its
    /// later work sees them); the call returns once the last one is queued, without waiting
    /// for it. An error of `fill` stops the upload and is returned. `fill` must not upload to
    /// this device itself (the staging buffers are held while it runs).
    pub fn copy_htod_with(
        &self,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        self.refuse_under_capture("copy_htod_with")?;
        self.check_own("copy_htod_with", dst)?;
        Self::check_range("copy_htod_with", dst, dst_offset, len)?;
        // A panic in `fill` leaves each chunk's in-flight mark true to its copies; keep going.
        let mut staging = self.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
        if staging.chunks.is_empty() && !staging.unavailable {
            for _ in 0..STAGING_BUFFERS {
                match PinnedChunk::new(&self.inner.raw, STAGING_CHUNK)? {
                    Some(chunk) => staging.chunks.push(chunk),
                    None => {
                        staging.chunks.clear();
                        staging.unavailable = true;
                        break;
                    }
                }
            }
        }
        let mut done = 0;
        if staging.unavailable {
            let mut piece = vec![0u8; len.min(STAGING_CHUNK)];
            while done < len {
                let n = (len - done).min(STAGING_CHUNK);
                fill(done, &mut piece[..n])?;
                self.copy_htod_pageable(&piece[..n], dst, dst_offset + done)?;
                done += n;
            }
            return Ok(());
        }
        while done < len {
            let n = (len - done).min(STAGING_CHUNK);
            let i = staging.next;
            staging.next = (i + 1) % staging.chunks.len();
            let chunk = &mut staging.chunks[i];
            fill(done, &mut chunk.writable()?[..n])?;
            // SAFETY: the chunk is page-locked and `n` <= its length; it is not written again
            // before `writable` has waited for the event recorded right after this copy, and it
            // is freed only after that event (its Drop).
            unsafe {
                self.inner.raw.memcpy_htod_async(
                    dst.device_ptr() + (dst_offset + done) as u64,
                    chunk.ptr,
                    n,
                    self.inner.stream.handle,
                )?;
            }
            chunk.copied.record(&self.inner.stream)?;
            chunk.in_flight = true;
            done += n;
        }
        Ok(())
    }
}
