//! Launch configuration, typed kernel arguments and the by-value layout struct.

use std::ffi::c_void;

use bytemuck::Pod;

pub use crate::kernel::{KernelLayout, MAX_DIMS};

use crate::device::{Buffer, DeviceInfo};
use crate::error::{Error, Result};

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

/// Threads per block of the elementwise helpers (a multiple of 32 and 64).
pub const DEFAULT_BLOCK: u32 = 256;
/// Blocks per multiprocessor the grid-stride helpers aim for.
const BLOCKS_PER_MP: u64 = 32;
/// The most blocks a grid may have along y or z (both vendors' limit).
pub const MAX_GRID_YZ: u32 = 65_535;
/// Blocks along x beyond which grid-stride kernels loop instead of launching more: enough
/// waves for any device, and far below the x limit.
pub const GRID_X_CAP: u64 = 1 << 20;

impl LaunchConfig {
    /// A 1-D grid-stride launch over `n` items: `DEFAULT_BLOCK` threads, enough blocks to
    /// cover `n` up to a few waves of the whole device (kernels loop over the rest).
    pub fn for_elements(n: u64, info: &DeviceInfo) -> Self {
        let blocks = n.div_ceil(u64::from(DEFAULT_BLOCK));
        let cap = u64::from(info.multiprocessor_count.max(1)) * BLOCKS_PER_MP;
        LaunchConfig {
            grid: [blocks.clamp(1, cap) as u32, 1, 1],
            block: [DEFAULT_BLOCK, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// One block of `block` threads per row, `rows` rows (x first, then y for > 2^31-1).
    pub fn for_rows(rows: u64, block: u32) -> Result<Self> {
        let max_x = u64::from(i32::MAX as u32);
        let (x, y) = if rows <= max_x {
            (rows, 1)
        } else {
            (max_x, rows.div_ceil(max_x))
        };
        if y > u64::from(MAX_GRID_YZ) {
            return Err(Error::InvalidLaunch {
                function: "-".into(),
                reason: format!("{rows} rows exceed the grid"),
            });
        }
        Ok(LaunchConfig {
            grid: [x.max(1) as u32, y as u32, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
        })
    }

    /// Checks the limits HIP and CUDA share, and the device's own.
    pub fn validate(&self, function: &str, info: &DeviceInfo) -> Result<()> {
        let bad = |reason: String| {
            Err(Error::InvalidLaunch {
                function: function.to_string(),
                reason,
            })
        };
        let threads: u64 = self.block.iter().map(|&b| u64::from(b)).product();
        if self.grid.contains(&0) || self.block.contains(&0) {
            return bad(format!(
                "empty grid {:?} or block {:?}",
                self.grid, self.block
            ));
        }
        if threads > u64::from(info.max_threads_per_block) {
            return bad(format!(
                "{threads} threads per block, the device allows {}",
                info.max_threads_per_block
            ));
        }
        if self.block[2] > 64
            || self.grid[1] > MAX_GRID_YZ
            || self.grid[2] > MAX_GRID_YZ
            || self.grid[0] > i32::MAX as u32
        {
            return bad(format!(
                "grid {:?} / block {:?} beyond the limits",
                self.grid, self.block
            ));
        }
        if self.shared_mem_bytes as usize > info.shared_mem_per_block {
            return bad(format!(
                "{} bytes of shared memory, the device allows {}",
                self.shared_mem_bytes, info.shared_mem_per_block
            ));
        }
        Ok(())
    }
}

/// Most arguments one launch takes.
pub const MAX_ARGS: usize = 32;
/// Most 8-byte words all arguments of one launch fill (a [`KernelLayout`] takes 18).
pub(crate) const MAX_WORDS: usize = 192;

/// Kernel arguments in order, held inline (no allocation). Each value starts on its own
/// 8-byte boundary; the launch passes a pointer to each, as HIP and CUDA expect. Pushing
/// past [`MAX_ARGS`] or the word budget is reported by the launch as `InvalidLaunch`.
#[derive(Clone)]
pub struct LaunchArgs {
    words: [u64; MAX_WORDS],
    /// First word of each argument.
    starts: [u16; MAX_ARGS],
    /// Byte length of each argument.
    lens: [u16; MAX_ARGS],
    count: usize,
    used_words: usize,
    overflowed: bool,
    /// Identity of the device of every buffer argument, checked at launch.
    devices: [usize; MAX_ARGS],
    device_count: usize,
}

impl Default for LaunchArgs {
    fn default() -> Self {
        LaunchArgs {
            words: [0; MAX_WORDS],
            starts: [0; MAX_ARGS],
            lens: [0; MAX_ARGS],
            count: 0,
            used_words: 0,
            overflowed: false,
            devices: [0; MAX_ARGS],
            device_count: 0,
        }
    }
}

impl std::fmt::Debug for LaunchArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries((0..self.count).filter_map(|i| self.bytes(i)))
            .finish()
    }
}

impl crate::kernel::ArgSink for LaunchArgs {
    fn scalar<T: Pod>(&mut self, value: T) {
        self.push(value);
    }

    fn pointer(&mut self, ptr: crate::kernel::DevicePtr) {
        self.note_device(ptr.device);
        self.push(ptr.addr);
    }
}

impl LaunchArgs {
    pub fn new() -> Self {
        Self::default()
    }

    /// A scalar or a `#[repr(C)]` plain-data struct (such as [`KernelLayout`]).
    pub fn push<T: Pod>(&mut self, value: T) -> &mut Self {
        let bytes = bytemuck::bytes_of(&value);
        let words = bytes.len().div_ceil(8).max(1);
        if self.count == MAX_ARGS || self.used_words + words > MAX_WORDS {
            self.overflowed = true;
            return self;
        }
        let slot = &mut self.words[self.used_words..self.used_words + words];
        slot.fill(0);
        bytemuck::cast_slice_mut::<u64, u8>(slot)[..bytes.len()].copy_from_slice(bytes);
        self.starts[self.count] = self.used_words as u16;
        self.lens[self.count] = bytes.len() as u16;
        self.count += 1;
        self.used_words += words;
        self
    }

    /// The device address of `buffer`'s first byte.
    pub fn push_buffer(&mut self, buffer: &Buffer) -> &mut Self {
        crate::kernel::ArgSink::pointer(self, buffer.ptr());
        self
    }

    /// The address of a device's ticket counters ([`crate::Tickets`]).
    pub fn push_tickets(&mut self, tickets: &crate::Tickets) -> &mut Self {
        self.note_device(tickets.device);
        self.push(tickets.ptr)
    }

    /// The device address `byte_offset` bytes into `buffer` (at most its length).
    pub fn push_buffer_at(&mut self, buffer: &Buffer, byte_offset: usize) -> Result<&mut Self> {
        crate::kernel::ArgSink::pointer(self, buffer.ptr_at(byte_offset)?);
        Ok(self)
    }

    /// A declared parameter list's values, in its order (see [`crate::kernel::params`]).
    pub fn from_params<P: crate::kernel::KernelParams>(params: &P) -> Self {
        let mut args = LaunchArgs::new();
        params.push_to(&mut args);
        args
    }

    /// Records the identity of the device handle an address argument belongs to.
    fn note_device(&mut self, device: usize) {
        if self.device_count < MAX_ARGS {
            self.devices[self.device_count] = device;
            self.device_count += 1;
        }
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of argument `i`, as the kernel will read them.
    pub fn bytes(&self, i: usize) -> Option<&[u8]> {
        (i < self.count).then(|| {
            let start = usize::from(self.starts[i]);
            let words = &self.words[start..];
            &bytemuck::cast_slice::<u64, u8>(words)[..usize::from(self.lens[i])]
        })
    }

    /// The device identities of the buffer arguments.
    pub(crate) fn devices(&self) -> &[usize] {
        &self.devices[..self.device_count]
    }

    /// Whether more was pushed than one launch can take.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// One pointer per argument (the first `len()` entries), valid while `self` is not
    /// touched.
    pub(crate) fn param_ptrs(&mut self) -> [*mut c_void; MAX_ARGS] {
        let mut ptrs = [std::ptr::null_mut(); MAX_ARGS];
        let base = self.words.as_mut_ptr();
        for (p, &start) in ptrs.iter_mut().zip(&self.starts[..self.count]) {
            // The start lies inside `words` (push checked the budget).
            *p = base.wrapping_add(usize::from(start)).cast::<c_void>();
        }
        ptrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Platform;

    fn info(mp: u32) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            platform: Platform::Amd,
            name: "test".into(),
            arch: "gfx942".into(),
            warp_size: 64,
            multiprocessor_count: mp,
            shared_mem_per_block: 65536,
            max_threads_per_block: 1024,
            total_memory: 1 << 30,
        }
    }

    #[test]
    fn layouts_merge_contiguous_dims_and_drop_unit_dims() {
        let l = KernelLayout::new(&[2, 3, 4], &[12, 4, 1], 5).unwrap();
        assert_eq!(
            (l.ndim, l.dims[0], l.strides[0], l.start, l.fits_u32),
            (1, 24, 1, 5, 1)
        );
        // transposed: nothing to merge
        let t = KernelLayout::new(&[3, 2], &[1, 3], 0).unwrap();
        assert_eq!(
            (t.ndim, &t.dims[..2], &t.strides[..2]),
            (2, &[3u64, 2][..], &[1u64, 3][..])
        );
        let b = KernelLayout::new(&[4, 1, 5], &[0, 99, 1], 0).unwrap(); // broadcast dim
        assert_eq!(
            (b.ndim, &b.dims[..2], &b.strides[..2]),
            (2, &[4u64, 5][..], &[0u64, 1][..])
        );
        let scalar = KernelLayout::new(&[], &[], 7).unwrap();
        assert_eq!((scalar.ndim, scalar.offset(0)), (0, 7));
    }

    #[test]
    fn offsets_match_a_direct_strided_walk() {
        let dims = [3usize, 4, 5];
        let strides = [1usize, 15, 3]; // a permuted contiguous tensor
        let l = KernelLayout::new(&dims, &strides, 2).unwrap();
        let mut i = 0u64;
        for a in 0..3 {
            for b in 0..4 {
                for c in 0..5 {
                    assert_eq!(l.offset(i), (2 + a + b * 15 + c * 3) as u64);
                    i += 1;
                }
            }
        }
    }

    #[test]
    fn big_tensors_leave_the_32_bit_path_and_deep_ones_are_refused() {
        let big = KernelLayout::new(&[1 << 17, 1 << 16], &[1 << 16, 1], 0).unwrap();
        assert_eq!(big.fits_u32, 0);
        let wide_span = KernelLayout::new(&[2, 2], &[1 << 32, 1], 0).unwrap();
        assert_eq!(wide_span.fits_u32, 0);
        let dims = [2usize; 9];
        let strides: Vec<usize> = (0..9).map(|i| 1 << (2 * (9 - i))).collect();
        let err = KernelLayout::new(&dims, &strides, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("9 strided dims"), "{err}");
        assert!(KernelLayout::new(&[2], &[1, 1], 0).is_err());
    }

    #[test]
    fn kernel_layout_matches_the_c_struct_size() {
        // u32 ndim, u32 fits_u32, u64 start, u64 dims[8], u64 strides[8]
        assert_eq!(std::mem::size_of::<KernelLayout>(), 8 + 8 + 64 + 64);
        assert_eq!(std::mem::align_of::<KernelLayout>(), 8);
    }

    #[test]
    fn arguments_pack_into_aligned_slots() {
        let mut args = LaunchArgs::new();
        args.push(7u8)
            .push(-2i64)
            .push(1.5f32)
            .push(half::bf16::from_f32(2.0));
        let layout = KernelLayout::new(&[3, 4], &[4, 1], 1).unwrap();
        args.push(layout);
        assert_eq!(args.len(), 5);
        assert_eq!(args.bytes(0).unwrap()[0], 7);
        assert_eq!(args.bytes(1).unwrap(), &(-2i64).to_le_bytes());
        assert_eq!(&args.bytes(2).unwrap()[..4], &1.5f32.to_le_bytes());
        assert_eq!(
            &args.bytes(3).unwrap()[..2],
            &half::bf16::from_f32(2.0).to_bits().to_le_bytes()
        );
        assert_eq!(args.bytes(4).unwrap(), bytemuck::bytes_of(&layout));
        let ptrs = args.param_ptrs();
        assert!(ptrs[..5].iter().all(|p| (*p as usize) % 8 == 0));
        assert!(!args.overflowed());
        // past the budget: recorded, reported by the launch
        let mut many = LaunchArgs::new();
        for _ in 0..12 {
            many.push(layout);
        }
        assert!(many.overflowed() && many.len() < 12);
        let mut count = LaunchArgs::new();
        for i in 0..MAX_ARGS as u64 {
            count.push(i);
        }
        assert!(!count.overflowed());
        count.push(0u8);
        assert!(count.overflowed());
    }

    #[test]
    fn launch_configs_cover_the_work_and_respect_limits() {
        let dev = info(100);
        let c = LaunchConfig::for_elements(1000, &dev);
        assert_eq!((c.grid[0], c.block[0]), (4, 256));
        assert_eq!(LaunchConfig::for_elements(0, &dev).grid[0], 1);
        assert_eq!(LaunchConfig::for_elements(1 << 40, &dev).grid[0], 3200);
        c.validate("k", &dev).unwrap();
        let too_wide = LaunchConfig {
            block: [2048, 1, 1],
            ..c
        };
        assert!(too_wide
            .validate("k", &dev)
            .unwrap_err()
            .to_string()
            .contains("2048 threads"));
        let too_much_smem = LaunchConfig {
            shared_mem_bytes: 1 << 20,
            ..c
        };
        assert!(too_much_smem.validate("k", &dev).is_err());
        let empty = LaunchConfig {
            grid: [0, 1, 1],
            ..c
        };
        assert!(empty.validate("k", &dev).is_err());
        let rows = LaunchConfig::for_rows(5_000_000_000, 64).unwrap();
        assert!(u64::from(rows.grid[0]) * u64::from(rows.grid[1]) >= 5_000_000_000);
        rows.validate("k", &dev).unwrap();
    }
}
