//! Device memory: buffers from the pool, typed buffers, copies and fills.

use std::fmt;
use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::platform::{AllocFailure, DevicePtr, Platform, RawDevice, StreamHandle};
use crate::pool::{Block, MemoryStats, RawAllocator};

use super::*;

/// The pool's view of a device.
pub(crate) struct Allocator<'a> {
    pub(crate) raw: &'a dyn RawDevice,
    pub(crate) stream: StreamHandle,
}

impl RawAllocator for Allocator<'_> {
    fn raw_alloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure> {
        self.raw.malloc(bytes)
    }
    fn raw_free(&self, ptr: DevicePtr) -> Result<()> {
        self.raw.free(ptr)
    }
    fn quiesce(&self) -> Result<()> {
        self.raw.stream_synchronize(self.stream)
    }
    fn mem_info(&self) -> Result<(usize, usize)> {
        self.raw.mem_info()
    }
    fn describe(&self) -> (Platform, usize) {
        (self.raw.platform(), self.raw.ordinal())
    }
}

impl Device {
    pub(crate) fn allocator(&self) -> Allocator<'_> {
        Allocator {
            raw: &*self.inner.raw,
            stream: self.inner.stream.handle,
        }
    }

    /// Pool counters.
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.pool.stats()
    }

    /// Starts `peak_in_use_bytes` over from the bytes in use now (to measure one step's peak,
    /// as torch's `reset_peak_memory_stats`).
    pub fn reset_peak_memory(&self) {
        self.inner.pool.reset_peak();
    }

    /// Returns every cached block to the driver; the bytes released.
    pub fn empty_cache(&self) -> Result<usize> {
        self.inner.pool.release_cached(&self.allocator())
    }

    /// An uninitialised buffer of `bytes` bytes (zero bytes: no allocation).
    pub fn alloc(&self, bytes: usize) -> Result<Buffer> {
        let _span = crate::host_time::span("rocm-device: alloc");
        let block = if bytes == 0 {
            None
        } else {
            Some(self.inner.pool.alloc(&self.allocator(), bytes)?)
        };
        Ok(Buffer {
            device: self.clone(),
            block,
            len: bytes,
        })
    }

    /// A buffer of `bytes` zero bytes.
    pub fn alloc_zeroed(&self, bytes: usize) -> Result<Buffer> {
        let buf = self.alloc(bytes)?;
        self.memset(&buf, 0, bytes, 0)?;
        Ok(buf)
    }

    /// An uninitialised buffer of `len` elements of `T`.
    pub fn alloc_typed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = byte_len::<T>(len)?;
        Ok(DeviceBuffer {
            buf: self.alloc(bytes)?,
            len,
            _t: PhantomData,
        })
    }

    /// `len` zero elements of `T`.
    pub fn alloc_zeroed_typed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = byte_len::<T>(len)?;
        Ok(DeviceBuffer {
            buf: self.alloc_zeroed(bytes)?,
            len,
            _t: PhantomData,
        })
    }

    /// Uploads `data` into a new buffer.
    pub fn htod<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc_typed::<T>(data.len())?;
        self.copy_htod(bytemuck::cast_slice(data), buf.as_buffer(), 0)?;
        Ok(buf)
    }

    /// Downloads a whole typed buffer.
    pub fn dtoh<T: DeviceRepr>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); src.len];
        self.copy_dtoh(src.as_buffer(), 0, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    pub(crate) fn check_own(&self, op: &'static str, buf: &Buffer) -> Result<()> {
        if buf.device.same_device(self) {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                op,
                left: format!("{self:?}"),
                right: format!("{:?}", buf.device),
            })
        }
    }

    pub(crate) fn check_range(
        op: &'static str,
        buf: &Buffer,
        offset: usize,
        bytes: usize,
    ) -> Result<()> {
        match offset.checked_add(bytes) {
            Some(end) if end <= buf.len => Ok(()),
            _ => Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "{bytes} bytes at offset {offset} of a {}-byte buffer",
                    buf.len
                ),
            }),
        }
    }

    /// Host bytes into `dst` at `dst_offset`; returns once `src` may be reused.
    pub fn copy_htod(&self, src: &[u8], dst: &Buffer, dst_offset: usize) -> Result<()> {
        if src.len() >= staging::STAGED_MIN_BYTES {
            // through page-locked buffers: `src` is copied out before this returns, the
            // device's copy is not waited for
            return self.copy_htod_with(dst, dst_offset, src.len(), &mut |at, out| {
                out.copy_from_slice(&src[at..at + out.len()]);
                Ok(())
            });
        }
        self.copy_htod_pageable(src, dst, dst_offset)
    }

    /// [`Device::copy_htod`] from pageable memory: the driver stages it, the host waits.
    pub(crate) fn copy_htod_pageable(
        &self,
        src: &[u8],
        dst: &Buffer,
        dst_offset: usize,
    ) -> Result<()> {
        self.refuse_under_capture("copy_htod")?;
        self.check_own("copy_htod", dst)?;
        Self::check_range("copy_htod", dst, dst_offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner.raw.memcpy_htod(
            dst.device_ptr() + dst_offset as u64,
            src,
            self.inner.stream.handle,
        )
    }

    /// `dst.len()` bytes of `src` from `src_offset` to the host, after all queued work.
    pub fn copy_dtoh(&self, src: &Buffer, src_offset: usize, dst: &mut [u8]) -> Result<()> {
        self.refuse_under_capture("copy_dtoh")?;
        self.check_own("copy_dtoh", src)?;
        Self::check_range("copy_dtoh", src, src_offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.inner.raw.memcpy_dtoh(
            dst,
            src.device_ptr() + src_offset as u64,
            self.inner.stream.handle,
        )
    }

    /// `bytes` bytes between two buffers of this device (queued on the stream).
    pub fn copy_dtod(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        self.check_own("copy_dtod", src)?;
        self.check_own("copy_dtod", dst)?;
        Self::check_range("copy_dtod", src, src_offset, bytes)?;
        Self::check_range("copy_dtod", dst, dst_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.inner.raw.memcpy_dtod(
            dst.device_ptr() + dst_offset as u64,
            src.device_ptr() + src_offset as u64,
            bytes,
            self.inner.stream.handle,
        )
    }

    /// Sets `bytes` bytes of `dst` from `offset` to `value` (queued on the stream).
    pub fn memset(&self, dst: &Buffer, offset: usize, bytes: usize, value: u8) -> Result<()> {
        self.check_own("memset", dst)?;
        Self::check_range("memset", dst, offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.inner.raw.memset_d8(
            dst.device_ptr() + offset as u64,
            value,
            bytes,
            self.inner.stream.handle,
        )
    }
}

pub(crate) fn byte_len<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::SizeMismatch {
            op: "alloc",
            detail: format!(
                "{len} elements of {} bytes overflow",
                std::mem::size_of::<T>()
            ),
        })
}

/// Plain-data element types a typed buffer may hold.
pub trait DeviceRepr: bytemuck::Pod + Send + Sync + 'static {}
macro_rules! device_repr {
    ($($t:ty),*) => { $(impl DeviceRepr for $t {})* };
}
device_repr!(
    u8,
    u16,
    u32,
    u64,
    i8,
    i16,
    i32,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);

/// Device memory from the pool; goes back to the pool on drop.
pub struct Buffer {
    pub(crate) device: Device,
    pub(crate) block: Option<Block>,
    pub(crate) len: usize,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({} bytes at {:#x} on {:?})",
            self.len,
            self.device_ptr(),
            self.device
        )
    }
}

impl Buffer {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The device address (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.block.map_or(0, |b| b.ptr)
    }

    /// The device address `byte_offset` bytes in (at most the length), as a kernel parameter.
    pub fn ptr_at(&self, byte_offset: usize) -> Result<crate::kernel::DevicePtr> {
        if byte_offset > self.len() {
            return Err(Error::SizeMismatch {
                op: "kernel argument",
                detail: format!("offset {byte_offset} past a buffer of {} bytes", self.len()),
            });
        }
        Ok(crate::kernel::DevicePtr {
            addr: self.device_ptr() + byte_offset as u64,
            device: self.device().id(),
        })
    }

    /// The device address of the first byte, as a kernel parameter.
    pub fn ptr(&self) -> crate::kernel::DevicePtr {
        crate::kernel::DevicePtr {
            addr: self.device_ptr(),
            device: self.device().id(),
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            let _span = crate::host_time::span("rocm-device: free");
            self.device.inner.pool.free(&self.device.allocator(), block);
        }
    }
}

/// A buffer of `len` elements of `T`.
pub struct DeviceBuffer<T> {
    pub(crate) buf: Buffer,
    pub(crate) len: usize,
    pub(crate) _t: PhantomData<T>,
}

impl<T> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] {:?}",
            std::any::type_name::<T>(),
            self.len,
            self.buf
        )
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Element count.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_buffer(&self) -> &Buffer {
        &self.buf
    }
    pub fn into_buffer(self) -> Buffer {
        self.buf
    }
    pub fn device(&self) -> &Device {
        &self.buf.device
    }
}
