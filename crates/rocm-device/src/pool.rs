//! Caching device allocator, one per device handle.
//!
//! Requests are rounded up to a size class; a freed block goes to its class's free list and
//! the next request of that class reuses it without a driver call. Reuse right after a free
//! is safe because every op of a device handle runs on its one stream, in order: whatever
//! reads the block next is queued after whatever used it last. On out-of-memory the pool
//! returns its whole cache to the driver and retries once.
//!
//! Graph capture: while a capture runs, every block the captured work allocates or frees
//! joins the graph's arena. A replay writes to the addresses the capture saw, so those
//! blocks must not serve anyone else while the graph lives: a block of the arena freed
//! (during the capture or later) waits in the arena's own free list, where later
//! allocations of the same capture may take it again (stream order makes that safe). When
//! the graph is dropped, its free blocks go to the cache and its live ones become ordinary.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::platform::{AllocFailure, DevicePtr};

/// Smallest class; also the alignment unit of the classes.
pub const MIN_CLASS_BYTES: usize = 512;
/// Above this, classes are 2 MiB apart instead of a quarter of the power of two.
const MAX_CLASS_STEP: usize = 2 << 20;

/// The size class a request of `bytes` is served from: multiples of 512 B, four classes per
/// power of two (rounding up by at most a quarter, or 512 B for small requests), with a 2 MiB
/// step for large blocks. `None` on overflow.
pub fn size_class(bytes: usize) -> Option<usize> {
    if bytes <= MIN_CLASS_BYTES {
        return Some(MIN_CLASS_BYTES);
    }
    let floor_log2 = usize::BITS - 1 - (bytes - 1).leading_zeros();
    let step = ((1usize << floor_log2) / 4).clamp(MIN_CLASS_BYTES, MAX_CLASS_STEP);
    bytes.checked_add(step - 1).map(|b| b / step * step)
}

/// Counters of one pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes (by class) held by live buffers.
    pub in_use_bytes: usize,
    /// Bytes (by class) kept for reuse.
    pub cached_bytes: usize,
    /// Highest `in_use_bytes` seen.
    pub peak_in_use_bytes: usize,
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that went to the driver.
    pub misses: u64,
    /// Driver allocations and frees.
    pub driver_allocs: u64,
    pub driver_frees: u64,
    /// Out-of-memory failures recovered by releasing the cache.
    pub oom_recoveries: u64,
    /// Bytes (by class) free but kept for a captured graph's replays.
    pub graph_reserved_bytes: usize,
}

impl MemoryStats {
    /// Fraction of requests served from the cache.
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

/// What the pool needs from the device.
pub(crate) trait RawAllocator {
    fn raw_alloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure>;
    fn raw_free(&self, ptr: DevicePtr) -> Result<()>;
    /// Waits until no queued work can still touch a cached block (before returning blocks
    /// to the driver).
    fn quiesce(&self) -> Result<()>;
    /// (free, total) device bytes, for the out-of-memory message.
    fn mem_info(&self) -> Result<(usize, usize)>;
    fn describe(&self) -> (crate::Platform, usize);
}

#[derive(Debug, Default)]
struct PoolState {
    free_lists: BTreeMap<usize, Vec<DevicePtr>>,
    stats: MemoryStats,
    /// The graph whose capture is running, if any.
    capturing: Option<u64>,
    next_graph: u64,
    /// Blocks of a graph's arena, free or live, by address.
    graph_owned: HashMap<DevicePtr, u64>,
    /// The free blocks of each graph's arena.
    graph_free: HashMap<u64, Vec<Block>>,
}

/// The caching allocator.
#[derive(Debug)]
pub(crate) struct Pool {
    state: Mutex<PoolState>,
    max_cached_bytes: usize,
}

/// A block handed out by the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub ptr: DevicePtr,
    pub class: usize,
}

impl Pool {
    /// `max_cached_bytes`: past this, freed blocks go back to the driver.
    pub(crate) fn new(max_cached_bytes: usize) -> Self {
        Self {
            state: Mutex::new(PoolState::default()),
            max_cached_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // A panic while holding the lock leaves plain counters and lists; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// Starts the peak over from the bytes in use now.
    pub(crate) fn reset_peak(&self) {
        let mut st = self.lock();
        st.stats.peak_in_use_bytes = st.stats.in_use_bytes;
    }

    /// A block of at least `bytes` (> 0).
    pub(crate) fn alloc(&self, raw: &dyn RawAllocator, bytes: usize) -> Result<Block> {
        let Some(class) = size_class(bytes) else {
            return Err(self.oom(raw, bytes, 0));
        };
        let capturing = {
            let mut st = self.lock();
            if let Some(id) = st.capturing {
                if let Some(block) = st.take_from_arena(id, class) {
                    return Ok(block);
                }
            }
            if let Some(ptr) = st.free_lists.get_mut(&class).and_then(Vec::pop) {
                st.stats.hits += 1;
                st.stats.cached_bytes -= class;
                st.stats.in_use_bytes += class;
                st.stats.peak_in_use_bytes = st.stats.peak_in_use_bytes.max(st.stats.in_use_bytes);
                if let Some(id) = st.capturing {
                    st.graph_owned.insert(ptr, id);
                }
                return Ok(Block { ptr, class });
            }
            st.stats.misses += 1;
            st.capturing
        };
        if let Some(id) = capturing {
            // No cache release under capture: returning blocks to the driver synchronizes.
            let ptr = match raw.raw_alloc(class) {
                Ok(ptr) => ptr,
                Err(AllocFailure::Other(e)) => return Err(e),
                Err(AllocFailure::OutOfMemory) => return Err(self.oom(raw, class, 0)),
            };
            let mut st = self.lock();
            st.stats.driver_allocs += 1;
            st.stats.in_use_bytes += class;
            st.stats.peak_in_use_bytes = st.stats.peak_in_use_bytes.max(st.stats.in_use_bytes);
            st.graph_owned.insert(ptr, id);
            return Ok(Block { ptr, class });
        }
        let ptr = match raw.raw_alloc(class) {
            Ok(ptr) => ptr,
            Err(AllocFailure::Other(e)) => return Err(e),
            Err(AllocFailure::OutOfMemory) => {
                let released = self.release_cached(raw)?;
                match raw.raw_alloc(class) {
                    Ok(ptr) => {
                        self.lock().stats.oom_recoveries += 1;
                        ptr
                    }
                    Err(AllocFailure::Other(e)) => return Err(e),
                    Err(AllocFailure::OutOfMemory) => return Err(self.oom(raw, class, released)),
                }
            }
        };
        let mut st = self.lock();
        st.stats.driver_allocs += 1;
        st.stats.in_use_bytes += class;
        st.stats.peak_in_use_bytes = st.stats.peak_in_use_bytes.max(st.stats.in_use_bytes);
        Ok(Block { ptr, class })
    }

    fn oom(&self, raw: &dyn RawAllocator, requested: usize, released: usize) -> Error {
        let (free, total) = raw.mem_info().unwrap_or((0, 0));
        let (platform, ordinal) = raw.describe();
        Error::OutOfMemory {
            platform,
            ordinal,
            requested,
            free,
            total,
            released,
        }
    }

    /// Takes a block back into the cache (or to the driver past the cache limit).
    pub(crate) fn free(&self, raw: &dyn RawAllocator, block: Block) {
        let over_limit = {
            let mut st = self.lock();
            st.stats.in_use_bytes -= block.class;
            if st.keep_for_graph(block) {
                return;
            }
            if st.stats.cached_bytes + block.class > self.max_cached_bytes {
                true
            } else {
                st.stats.cached_bytes += block.class;
                st.free_lists
                    .entry(block.class)
                    .or_default()
                    .push(block.ptr);
                false
            }
        };
        if over_limit {
            // Freeing to the driver must wait for queued work that may still use the block.
            let freed = raw.quiesce().and_then(|()| raw.raw_free(block.ptr));
            match freed {
                Ok(()) => self.lock().stats.driver_frees += 1,
                Err(e) => tracing::warn!("returning a device block to the driver failed: {e}"),
            }
        }
    }

    /// Starts routing allocations and frees into a new graph arena; its id.
    pub(crate) fn begin_capture(&self) -> Option<u64> {
        let mut st = self.lock();
        if st.capturing.is_some() {
            return None;
        }
        let id = st.next_graph;
        st.next_graph += 1;
        st.capturing = Some(id);
        Some(id)
    }

    /// Ends the routing of [`Pool::begin_capture`]; the arena stays with its graph.
    pub(crate) fn end_capture(&self) {
        self.lock().capturing = None;
    }

    /// Whether a capture is running.
    pub(crate) fn is_capturing(&self) -> bool {
        self.lock().capturing.is_some()
    }

    /// The graph `id` is gone: its free blocks join the cache, its live ones become ordinary.
    pub(crate) fn release_graph(&self, id: u64) {
        let mut st = self.lock();
        for block in st.graph_free.remove(&id).unwrap_or_default() {
            st.stats.graph_reserved_bytes -= block.class;
            st.stats.cached_bytes += block.class;
            st.free_lists
                .entry(block.class)
                .or_default()
                .push(block.ptr);
        }
        st.graph_owned.retain(|_, owner| *owner != id);
    }

    /// Returns every cached block to the driver; the bytes released.
    pub(crate) fn release_cached(&self, raw: &dyn RawAllocator) -> Result<usize> {
        let lists = std::mem::take(&mut self.lock().free_lists);
        if lists.is_empty() {
            return Ok(0);
        }
        raw.quiesce()?;
        let mut released = 0;
        let mut first_error = None;
        for (class, ptrs) in lists {
            for ptr in ptrs {
                match raw.raw_free(ptr) {
                    Ok(()) => {
                        released += class;
                        let mut st = self.lock();
                        st.stats.cached_bytes -= class;
                        st.stats.driver_frees += 1;
                    }
                    Err(e) => {
                        // The block is lost to the pool either way; count it out and report.
                        self.lock().stats.cached_bytes -= class;
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }
}

impl PoolState {
    /// A free block of `class` from graph `id`'s arena, now in use.
    fn take_from_arena(&mut self, id: u64, class: usize) -> Option<Block> {
        let free = self.graph_free.get_mut(&id)?;
        let at = free.iter().position(|b| b.class == class)?;
        let block = free.swap_remove(at);
        self.stats.hits += 1;
        self.stats.graph_reserved_bytes -= class;
        self.stats.in_use_bytes += class;
        self.stats.peak_in_use_bytes = self.stats.peak_in_use_bytes.max(self.stats.in_use_bytes);
        Some(block)
    }

    /// Keeps a freed block in its graph's arena (a block freed under capture joins the
    /// capturing graph's); false when no graph holds it.
    fn keep_for_graph(&mut self, block: Block) -> bool {
        if self.capturing.is_none() && self.graph_owned.is_empty() {
            return false;
        }
        let owner = match (self.graph_owned.get(&block.ptr), self.capturing) {
            (Some(&id), _) => id,
            (None, Some(id)) => {
                self.graph_owned.insert(block.ptr, id);
                id
            }
            (None, None) => return false,
        };
        self.stats.graph_reserved_bytes += block.class;
        self.graph_free.entry(owner).or_default().push(block);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::HashSet;

    /// A pretend device with a byte budget.
    struct FakeDevice {
        capacity: usize,
        used: Cell<usize>,
        next: Cell<u64>,
        live: RefCell<std::collections::HashMap<u64, usize>>,
        quiesced: Cell<u32>,
    }

    impl FakeDevice {
        fn new(capacity: usize) -> Self {
            Self {
                capacity,
                used: Cell::new(0),
                next: Cell::new(0x1000),
                live: RefCell::default(),
                quiesced: Cell::new(0),
            }
        }
    }

    impl RawAllocator for FakeDevice {
        fn raw_alloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure> {
            if self.used.get() + bytes > self.capacity {
                return Err(AllocFailure::OutOfMemory);
            }
            self.used.set(self.used.get() + bytes);
            let p = self.next.get();
            self.next.set(p + bytes as u64);
            self.live.borrow_mut().insert(p, bytes);
            Ok(p)
        }
        fn raw_free(&self, ptr: DevicePtr) -> Result<()> {
            let bytes = self.live.borrow_mut().remove(&ptr).expect("double free");
            self.used.set(self.used.get() - bytes);
            Ok(())
        }
        fn quiesce(&self) -> Result<()> {
            self.quiesced.set(self.quiesced.get() + 1);
            Ok(())
        }
        fn mem_info(&self) -> Result<(usize, usize)> {
            Ok((self.capacity - self.used.get(), self.capacity))
        }
        fn describe(&self) -> (crate::Platform, usize) {
            (crate::Platform::Amd, 3)
        }
    }

    #[test]
    fn size_classes_round_up_by_at_most_a_quarter() {
        assert_eq!(size_class(0), Some(512));
        assert_eq!(size_class(1), Some(512));
        assert_eq!(size_class(512), Some(512));
        assert_eq!(size_class(513), Some(1024));
        assert_eq!(size_class(1024), Some(1024));
        assert_eq!(size_class(1025), Some(1536));
        assert_eq!(size_class(4097), Some(5120));
        assert_eq!(size_class(3 << 20), Some(3 << 20));
        assert_eq!(size_class((1 << 30) + 1), Some((1 << 30) + (2 << 20)));
        assert_eq!(size_class(usize::MAX), None);
        for bytes in (1..5_000_000).step_by(997) {
            let c = size_class(bytes).unwrap();
            assert!(c >= bytes && c % 512 == 0, "{bytes} -> {c}");
            assert!(c - bytes < (bytes / 4).max(512), "{bytes} -> {c}");
            assert_eq!(size_class(c), Some(c), "a class is its own class");
        }
    }

    #[test]
    fn a_freed_block_is_reused_without_a_driver_call() {
        let dev = FakeDevice::new(1 << 20);
        let pool = Pool::new(usize::MAX);
        let a = pool.alloc(&dev, 1000).unwrap();
        pool.free(&dev, a);
        let b = pool.alloc(&dev, 900).unwrap(); // same class (1024)
        assert_eq!(a, b);
        let s = pool.stats();
        assert_eq!((s.hits, s.misses, s.driver_allocs), (1, 1, 1));
        assert_eq!(
            (s.in_use_bytes, s.cached_bytes, s.peak_in_use_bytes),
            (1024, 0, 1024)
        );
        assert!((s.hit_rate() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_graph_arena_keeps_its_blocks_from_everyone_else_until_released() {
        let dev = FakeDevice::new(1 << 24);
        let pool = Pool::new(usize::MAX);
        let before = pool.alloc(&dev, 4096).unwrap(); // allocated before the capture
        let cached = pool.alloc(&dev, 2048).unwrap();
        pool.free(&dev, cached);

        let id = pool.begin_capture().unwrap();
        assert!(pool.begin_capture().is_none(), "one capture at a time");
        assert!(pool.is_capturing());
        let from_cache = pool.alloc(&dev, 2048).unwrap();
        assert_eq!(from_cache, cached, "the cache still serves the capture");
        let temp = pool.alloc(&dev, 8192).unwrap();
        pool.free(&dev, temp);
        let again = pool.alloc(&dev, 8192).unwrap();
        assert_eq!(again, temp, "the capture reuses its own freed blocks");
        pool.free(&dev, again);
        pool.free(&dev, before); // an older block the captured work used last
        let output = pool.alloc(&dev, 100).unwrap(); // lives past the capture
        pool.end_capture();
        assert!(!pool.is_capturing());

        let reserved = 8192 + 4096;
        assert_eq!(pool.stats().graph_reserved_bytes, reserved);
        // None of the arena's blocks serves work after the capture.
        let later: Vec<Block> = [8192, 4096, 100]
            .iter()
            .map(|&b| pool.alloc(&dev, b).unwrap())
            .collect();
        for b in &later {
            assert!(
                ![temp.ptr, before.ptr, output.ptr].contains(&b.ptr),
                "{b:?}"
            );
        }
        // The live output freed later goes back to its arena, not to the cache.
        pool.free(&dev, output);
        assert_eq!(pool.stats().graph_reserved_bytes, reserved + 512);
        let small = pool.alloc(&dev, 100).unwrap();
        assert_ne!(small.ptr, output.ptr);

        pool.release_graph(id);
        let s = pool.stats();
        assert_eq!(s.graph_reserved_bytes, 0);
        assert_eq!(s.cached_bytes, reserved + 512);
        let reused = pool.alloc(&dev, 8192).unwrap();
        assert_eq!(reused.ptr, temp.ptr, "released blocks serve everyone again");
        // A block of the capture still alive at release is ordinary afterwards.
        pool.free(&dev, from_cache);
        assert_eq!(pool.stats().graph_reserved_bytes, 0);
        for b in later.into_iter().chain([small, reused]) {
            pool.free(&dev, b);
        }
        assert_eq!(pool.stats().in_use_bytes, 0);
    }

    #[test]
    fn out_of_memory_under_capture_is_an_error_without_releasing_the_cache() {
        let dev = FakeDevice::new(4096);
        let pool = Pool::new(usize::MAX);
        let a = pool.alloc(&dev, 2048).unwrap();
        pool.free(&dev, a);
        pool.begin_capture().unwrap();
        let err = pool.alloc(&dev, 4096).unwrap_err();
        assert!(
            matches!(err, Error::OutOfMemory { released: 0, .. }),
            "{err}"
        );
        pool.end_capture();
        assert_eq!(dev.quiesced.get(), 0, "no synchronizing call under capture");
        assert_eq!(pool.stats().cached_bytes, 2048);
    }

    #[test]
    fn accounting_tracks_in_use_cached_and_peak() {
        let dev = FakeDevice::new(1 << 24);
        let pool = Pool::new(usize::MAX);
        let blocks: Vec<Block> = (1..=10)
            .map(|i| pool.alloc(&dev, i * 1000).unwrap())
            .collect();
        let sum: usize = blocks.iter().map(|b| b.class).sum();
        let ptrs: HashSet<u64> = blocks.iter().map(|b| b.ptr).collect();
        assert_eq!(ptrs.len(), 10, "live blocks never alias");
        assert_eq!(pool.stats().in_use_bytes, sum);
        for b in blocks {
            pool.free(&dev, b);
        }
        let s = pool.stats();
        assert_eq!(
            (s.in_use_bytes, s.cached_bytes, s.peak_in_use_bytes),
            (0, sum, sum)
        );
        assert_eq!(pool.release_cached(&dev).unwrap(), sum);
        let s = pool.stats();
        assert_eq!((s.cached_bytes, s.driver_frees), (0, 10));
        assert_eq!(dev.used.get(), 0, "everything went back to the driver");
        assert!(
            dev.quiesced.get() >= 1,
            "the stream is drained before driver frees"
        );
    }

    #[test]
    fn a_reset_peak_starts_from_the_bytes_in_use() {
        let dev = FakeDevice::new(1 << 24);
        let pool = Pool::new(usize::MAX);
        let big = pool.alloc(&dev, 1 << 20).unwrap();
        let small = pool.alloc(&dev, 1000).unwrap();
        let small_class = small.class;
        pool.free(&dev, big);
        assert!(pool.stats().peak_in_use_bytes > small_class);
        pool.reset_peak();
        assert_eq!(pool.stats().peak_in_use_bytes, small_class);
        pool.free(&dev, small);
    }

    #[test]
    fn out_of_memory_releases_the_cache_and_retries_once() {
        let dev = FakeDevice::new(4096);
        let pool = Pool::new(usize::MAX);
        let a = pool.alloc(&dev, 2048).unwrap();
        pool.free(&dev, a); // 2048 cached, driver still holds it
        let b = pool.alloc(&dev, 3000).unwrap(); // class 3072: needs the cache released
        assert_eq!(b.class, 3072);
        let s = pool.stats();
        assert_eq!(
            (s.oom_recoveries, s.cached_bytes, s.in_use_bytes),
            (1, 0, 3072)
        );
        let err = pool.alloc(&dev, 4000).unwrap_err();
        match err {
            Error::OutOfMemory {
                requested,
                free,
                total,
                ordinal,
                ..
            } => {
                assert_eq!((requested, free, total, ordinal), (4096, 1024, 4096, 3));
            }
            other => panic!("expected OutOfMemory, got {other}"),
        }
        // The pool is still usable after the failure.
        pool.free(&dev, b);
        assert!(pool.alloc(&dev, 4000).is_ok());
    }

    #[test]
    fn an_unrepresentable_size_is_an_out_of_memory_error() {
        let dev = FakeDevice::new(4096);
        let pool = Pool::new(usize::MAX);
        let err = pool.alloc(&dev, usize::MAX - 3).unwrap_err().to_string();
        assert!(
            err.contains("out of device memory") && err.contains(&(usize::MAX - 3).to_string()),
            "{err}"
        );
    }

    #[test]
    fn the_cache_limit_sends_surplus_blocks_to_the_driver() {
        let dev = FakeDevice::new(1 << 20);
        let pool = Pool::new(1024);
        let a = pool.alloc(&dev, 1024).unwrap();
        let b = pool.alloc(&dev, 1024).unwrap();
        pool.free(&dev, a);
        pool.free(&dev, b);
        let s = pool.stats();
        assert_eq!((s.cached_bytes, s.driver_frees), (1024, 1));
        assert_eq!(dev.used.get(), 1024);
    }
}
