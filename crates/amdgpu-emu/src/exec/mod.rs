//! Running a kernel: the dispatch state the hardware sets up (user SGPRs in the order the
//! descriptor enables them, workgroup ids after them, work-item ids packed in v0), waves of
//! 32 or 64 lanes stepping through the decoded instructions, and an emulated device memory
//! where an access outside every allocation is an error naming the kernel, the instruction
//! and the address.
//!
//! One file for the dispatch, the waves and the emulated memory: the workgroup loop, a wave's
//! state and the memory's accessors are the emulator's hot path, read together.
//!
//! The instructions it runs are in [`ops`]; one it does not is a typed error naming it.

mod ops;

use crate::code_object::{ArgKind, KernelInfo, UserSgpr};
use crate::decode::{decode, Instruction};
use crate::{Arch, CodeObject};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

/// Why a kernel stopped short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("{kernel}: `{mnemonic}` at {address:#x} ({words}) is not implemented by the emulator")]
    Unimplemented {
        kernel: String,
        mnemonic: String,
        address: u64,
        words: String,
    },
    #[error("{kernel}: `{mnemonic}` at {address:#x} accessed {bytes} bytes at {target:#x}, outside every allocation")]
    BadAccess {
        kernel: String,
        mnemonic: String,
        address: u64,
        target: u64,
        bytes: usize,
    },
    #[error("{kernel}: `{mnemonic}` at {address:#x} accessed {bytes} LDS bytes at {target:#x}, past the workgroup's {size}")]
    BadLds {
        kernel: String,
        mnemonic: String,
        address: u64,
        target: u64,
        bytes: usize,
        size: usize,
    },
    #[error("{kernel}: `{mnemonic}` at {address:#x} accessed {bytes} private bytes at {target:#x}, past the work-item's {size}")]
    BadPrivate {
        kernel: String,
        mnemonic: String,
        address: u64,
        target: u64,
        bytes: usize,
        size: usize,
    },
    #[error("{kernel}: `{mnemonic}` at {address:#x}: {what}")]
    Operand {
        kernel: String,
        mnemonic: String,
        address: u64,
        what: String,
    },
    #[error("{kernel}: the workgroup's waves cannot all reach the barrier at {address:#x}")]
    Barrier { kernel: String, address: u64 },
    #[error("{kernel}: a wave ran past {limit} instructions (at {address:#x})")]
    StepLimit {
        kernel: String,
        limit: u64,
        address: u64,
    },
    #[error("{kernel}: {what}")]
    Dispatch { kernel: String, what: String },
    #[error(transparent)]
    Decode(#[from] crate::Error),
}

pub type ExecResult<T> = std::result::Result<T, ExecError>;

/// The emulated device's memory: allocations at addresses of their own, 64 KiB apart, so an
/// access that runs past an allocation's end is outside every one.
///
/// Workgroups run on several threads at once, so an allocation's bytes are atomic words that
/// loads and stores reach through a shared reference (relaxed: a kernel whose workgroups race
/// on a word gets one of the values, as on the hardware); read-modify-write atomics take one
/// of [`ATOMIC_STRIPES`] locks by address, which also orders what a workgroup stored before
/// them for the workgroup that takes the lock next.
#[derive(Debug)]
pub struct Memory {
    allocations: std::collections::BTreeMap<u64, Allocation>,
    next: u64,
    in_use: usize,
    capacity: usize,
    atomics: Box<[std::sync::Mutex<()>]>,
}

/// How many locks the read-modify-write atomics spread over (by their 8-byte word).
pub const ATOMIC_STRIPES: usize = 64;

#[derive(Debug)]
struct Allocation {
    words: Box<[AtomicU32]>,
    len: usize,
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

/// What [`Memory::new`] holds at most: more than any test asks for, less than a CI machine has.
pub const DEFAULT_CAPACITY: usize = 16 << 30;

impl Memory {
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }

    /// A memory that holds at most `capacity` bytes of allocations.
    pub fn with_capacity(capacity: usize) -> Self {
        Memory {
            allocations: Default::default(),
            // away from 0, so that a null pointer is never inside an allocation
            next: 0x1_0000_0000,
            in_use: 0,
            capacity,
            atomics: (0..ATOMIC_STRIPES)
                .map(|_| std::sync::Mutex::new(()))
                .collect(),
        }
    }

    /// Bytes allocated and not freed; the most that may be.
    pub fn usage(&self) -> (usize, usize) {
        (self.in_use, self.capacity)
    }

    /// A new zeroed allocation of `bytes`; its address, or `None` past the capacity.
    pub fn try_alloc(&mut self, bytes: usize) -> Option<u64> {
        if bytes > self.capacity - self.in_use {
            return None;
        }
        // zeroed pages come from the system as they are touched
        let words = bytemuck::zeroed_slice_box::<AtomicU32>(bytes.div_ceil(4));
        let address = self.next;
        self.allocations
            .insert(address, Allocation { words, len: bytes });
        self.in_use += bytes;
        self.next += (bytes as u64).div_ceil(0x1_0000).max(1) * 0x1_0000 + 0x1_0000;
        Some(address)
    }

    /// A new zeroed allocation of `bytes`; its address.
    pub fn alloc(&mut self, bytes: usize) -> u64 {
        self.try_alloc(bytes)
            .expect("the emulated memory holds the allocation")
    }

    /// Frees the allocation at `address`; false if none starts there.
    pub fn free(&mut self, address: u64) -> bool {
        match self.allocations.remove(&address) {
            Some(a) => {
                self.in_use -= a.len;
                true
            }
            None => false,
        }
    }

    /// An allocation holding `data`.
    pub fn upload(&mut self, data: &[u8]) -> u64 {
        let a = self.alloc(data.len());
        self.write(a, data)
            .expect("a fresh allocation holds its data");
        a
    }

    /// The words of the allocation holding `len` bytes at `address`, and the byte offset of
    /// `address` in them.
    fn find(&self, address: u64, len: usize) -> Option<(&[AtomicU32], usize)> {
        let (base, a) = self.allocations.range(..=address).next_back()?;
        let at = usize::try_from(address - base).ok()?;
        (at.checked_add(len)? <= a.len).then_some((&a.words, at))
    }

    pub fn read(&self, address: u64, out: &mut [u8]) -> Option<()> {
        let (words, at) = self.find(address, out.len())?;
        if at % 4 == 0 && out.len() % 4 == 0 {
            for (o, w) in out.chunks_exact_mut(4).zip(&words[at / 4..]) {
                o.copy_from_slice(&w.load(Relaxed).to_le_bytes());
            }
            return Some(());
        }
        for (i, o) in out.iter_mut().enumerate() {
            let b = at + i;
            *o = (words[b / 4].load(Relaxed) >> (8 * (b % 4))) as u8;
        }
        Some(())
    }

    /// Stores `data` at `address` (through a shared reference: the words are atomic).
    pub fn write(&self, address: u64, data: &[u8]) -> Option<()> {
        let (words, at) = self.find(address, data.len())?;
        if at % 4 == 0 && data.len() % 4 == 0 {
            for (d, w) in data.chunks_exact(4).zip(&words[at / 4..]) {
                w.store(u32::from_le_bytes([d[0], d[1], d[2], d[3]]), Relaxed);
            }
            return Some(());
        }
        // a word's bytes merged into it, the others left as they are
        let mut i = 0;
        while i < data.len() {
            let b = at + i;
            let (word, first) = (b / 4, b % 4);
            let n = (4 - first).min(data.len() - i);
            let mut value = 0u32;
            let mut mask = 0u32;
            for k in 0..n {
                value |= u32::from(data[i + k]) << (8 * (first + k));
                mask |= 0xff << (8 * (first + k));
            }
            if mask == u32::MAX {
                words[word].store(value, Relaxed);
            } else {
                let _ = words[word].fetch_update(Relaxed, Relaxed, |old| Some(old & !mask | value));
            }
            i += n;
        }
        Some(())
    }

    /// Sets `len` bytes at `address` to `value`.
    pub fn fill(&self, address: u64, len: usize, value: u8) -> Option<()> {
        self.find(address, len)?;
        let chunk = [value; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(address + done as u64, &chunk[..n])?;
            done += n;
        }
        Some(())
    }

    /// A read-modify-write of the `bytes` (4 or 8) at `address`, atomic against every other
    /// one: `update` maps the old value to the new one (or to `None` for an operation it does
    /// not know, leaving memory as it was); the old value. `None` outside every allocation.
    pub fn atomic(
        &self,
        address: u64,
        bytes: usize,
        update: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<Option<u64>> {
        self.find(address, bytes)?;
        let stripe = (address >> 3) as usize % self.atomics.len();
        let _held = self.atomics[stripe]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut buf = [0u8; 8];
        self.read(address, &mut buf[..bytes])?;
        let old = u64::from_le_bytes(buf);
        let Some(new) = update(old) else {
            return Some(None);
        };
        self.write(address, &new.to_le_bytes()[..bytes])?;
        Some(Some(old))
    }

    /// Copies `len` bytes from `src` to `dst` (both inside allocations; they may overlap).
    pub fn copy(&self, dst: u64, src: u64, len: usize) -> Option<()> {
        let data = self.download(src, len)?;
        self.write(dst, &data)
    }

    /// `len` bytes at `address`.
    pub fn download(&self, address: u64, len: usize) -> Option<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.read(address, &mut out)?;
        Some(out)
    }
}

/// A launch: grid and block in work-items of each dimension, the explicit arguments' bytes
/// (as the kernel's `.args` lay them out; the hidden ones are filled here), the dynamic LDS
/// bytes, and the order a workgroup's waves take turns in between barriers.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<u8>,
    pub dynamic_lds: u32,
    pub schedule: Schedule,
    /// Most instructions a wave may run ([`STEP_LIMIT`] where none is given).
    pub step_limit: Option<u64>,
    /// Print the first workgroup's first wave's instructions to stderr, each with the
    /// registers it changed in lane `trace_lane` (for finding where a kernel goes wrong).
    pub trace: bool,
    pub trace_lane: usize,
    /// Threads the workgroups are spread over (0 or 1: the caller's thread alone).
    pub threads: usize,
}

/// The order in which a workgroup's waves run between barriers. A kernel whose result
/// depends on it lacks a barrier (or has a race the hardware may or may not show).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Schedule {
    /// Wave 0 first.
    #[default]
    InOrder,
    /// The last wave first.
    Reversed,
    /// A fixed pseudo-random order, new at each barrier, from this seed.
    Shuffled(u64),
}

/// Counters of a finished dispatch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub workgroups: u64,
    pub waves: u64,
    /// Instructions executed, summed over waves.
    pub wave_instructions: u64,
}

/// Most instructions one wave may execute before the dispatch is an error.
pub const STEP_LIMIT: u64 = 50_000_000;

/// One wavefront's state.
pub(crate) struct Wave {
    pub lanes: usize,
    /// SGPRs by operand code 0..127 (s0..s105, vcc, ttmp, m0/null, exec).
    pub s: [u32; 128],
    pub v: Vec<Vec<u32>>,
    pub scc: bool,
    pub pc: u64,
    pub done: bool,
    /// Waiting at `s_barrier` for the workgroup's other waves.
    pub at_barrier: bool,
    /// Each lane's private (scratch) memory, `private_size` bytes a lane, lane after lane.
    pub private: Vec<u8>,
    pub private_size: usize,
    /// Accumulation registers (gfx942's AGPRs), `a[i][lane]`.
    pub a: Vec<Vec<u32>>,
}

impl Wave {
    /// Back to the state of a new wave at `entry`: every register zero.
    fn reset(&mut self, entry: u64) {
        self.s = [0; 128];
        for r in self.v.iter_mut().chain(self.a.iter_mut()) {
            r.fill(0);
        }
        self.private.fill(0);
        self.scc = false;
        self.pc = entry;
        self.done = false;
        self.at_barrier = false;
    }

    pub fn exec(&self) -> u64 {
        let lo = u64::from(self.s[126]);
        if self.lanes == 32 {
            lo
        } else {
            lo | (u64::from(self.s[127]) << 32)
        }
    }

    pub fn set_exec(&mut self, mask: u64) {
        self.s[126] = mask as u32;
        self.s[127] = if self.lanes == 32 {
            0
        } else {
            (mask >> 32) as u32
        };
    }

    pub fn active(&self, lane: usize) -> bool {
        self.exec() >> lane & 1 != 0
    }
}

/// What an instruction did to control flow.
pub(crate) enum Flow {
    Next,
    /// Jump by this many bytes from the next instruction.
    Branch(i64),
    End,
    /// Wait for the workgroup's other waves (`s_barrier`).
    Barrier,
}

/// The state instructions reach beyond their wave.
pub(crate) struct Context<'a> {
    pub arch: Arch,
    pub step_limit: u64,
    pub memory: &'a Memory,
    pub kernel: &'a str,
    /// The workgroup's LDS.
    pub lds: &'a mut [u8],
    /// Trace this workgroup's first wave (in lane .1).
    pub trace: Option<usize>,
}

impl Context<'_> {
    pub fn bad_lds(&self, inst: &Instruction, target: u64, bytes: usize) -> ExecError {
        ExecError::BadLds {
            kernel: self.kernel.to_string(),
            mnemonic: inst.mnemonic.to_string(),
            address: inst.address,
            target,
            bytes,
            size: self.lds.len(),
        }
    }

    pub fn bad_access(&self, inst: &Instruction, target: u64, bytes: usize) -> ExecError {
        ExecError::BadAccess {
            kernel: self.kernel.to_string(),
            mnemonic: inst.mnemonic.to_string(),
            address: inst.address,
            target,
            bytes,
        }
    }
}

/// Fills the hidden arguments the kernel's metadata lists.
fn kernarg_segment(k: &KernelInfo, launch: &Launch) -> ExecResult<Vec<u8>> {
    let mut seg = vec![0u8; k.kernarg_segment_size.max(launch.args.len() as u32) as usize];
    seg[..launch.args.len()].copy_from_slice(&launch.args);
    let blocks = |d: usize| launch.grid[d].div_ceil(launch.block[d].max(1));
    for a in &k.args {
        let ArgKind::Hidden(name) = &a.kind else {
            continue;
        };
        let dim = |s: &str| match s.chars().last() {
            Some('x') => 0,
            Some('y') => 1,
            _ => 2,
        };
        let value: u64 = match name.as_str() {
            n if n.starts_with("block_count_") => u64::from(blocks(dim(n))),
            n if n.starts_with("group_size_") => u64::from(launch.block[dim(n)]),
            n if n.starts_with("remainder_") => {
                u64::from(launch.grid[dim(n)] % launch.block[dim(n)].max(1))
            }
            n if n.starts_with("global_offset_") => 0,
            "grid_dims" => launch
                .grid
                .iter()
                .rposition(|&g| g > 1)
                .map_or(1, |d| d as u64 + 1),
            "dynamic_lds_size" => u64::from(launch.dynamic_lds),
            // printf, hostcall, heap, queue and the rest: none here
            _ => 0,
        };
        let at = a.offset as usize;
        let size = a.size as usize;
        seg.get_mut(at..at + size)
            .ok_or_else(|| ExecError::Dispatch {
                kernel: k.name.clone(),
                what: format!("hidden argument {name} past the segment"),
            })?
            .copy_from_slice(&value.to_le_bytes()[..size]);
    }
    Ok(seg)
}

/// Runs kernel `name` of `co` over `launch` on `memory`: every workgroup in order, its waves
/// in turn. (A [`Module`] keeps its decoded instructions from one dispatch to the next.)
pub fn dispatch(
    co: &CodeObject,
    name: &str,
    launch: &Launch,
    memory: &mut Memory,
) -> ExecResult<Report> {
    run_dispatch(co, &DecodeCache::new(co), name, launch, memory)
}

/// A loaded code object and its instructions decoded so far, for dispatch after dispatch.
#[derive(Debug)]
pub struct Module {
    pub code: CodeObject,
    cache: DecodeCache,
}

impl Module {
    pub fn new(code: CodeObject) -> Self {
        let cache = DecodeCache::new(&code);
        Module { code, cache }
    }

    /// Runs kernel `name` over `launch` on `memory`, as [`dispatch`].
    pub fn dispatch(&self, name: &str, launch: &Launch, memory: &mut Memory) -> ExecResult<Report> {
        run_dispatch(&self.code, &self.cache, name, launch, memory)
    }
}

/// The LDS one workgroup may have on the emulated archs (gfx942 and gfx1100 both: 64 KiB).
pub const WORKGROUP_LDS_BYTES: u64 = 64 << 10;

fn run_dispatch(
    co: &CodeObject,
    cache: &DecodeCache,
    name: &str,
    launch: &Launch,
    memory: &mut Memory,
) -> ExecResult<Report> {
    let k = co.kernel(name).ok_or_else(|| ExecError::Dispatch {
        kernel: name.to_string(),
        what: "no such kernel in the code object".into(),
    })?;
    let fail = |what: String| ExecError::Dispatch {
        kernel: name.to_string(),
        what,
    };
    let threads: u32 = launch.block.iter().product();
    if threads == 0 || threads > k.max_flat_workgroup_size {
        return Err(fail(format!(
            "a block of {threads} work-items (the kernel takes 1 to {})",
            k.max_flat_workgroup_size
        )));
    }
    let lds = u64::from(k.descriptor.group_segment_fixed_size) + u64::from(launch.dynamic_lds);
    if lds > WORKGROUP_LDS_BYTES {
        return Err(fail(format!(
            "{lds} bytes of LDS a workgroup ({} static, {} dynamic): gfx942 and gfx1100 have {WORKGROUP_LDS_BYTES}",
            k.descriptor.group_segment_fixed_size, launch.dynamic_lds
        )));
    }
    let segment = kernarg_segment(k, launch)?;
    let kernargs = memory
        .try_alloc(segment.len())
        .ok_or_else(|| fail("no memory left for the kernel arguments".into()))?;
    memory.write(kernargs, &segment);
    // the dispatch packet (hsa_kernel_dispatch_packet_t, 64 bytes) and a queue of zeros, for
    // kernels that read them (the descriptor's DispatchPtr / QueuePtr)
    let packet = dispatch_packet(k, launch, kernargs);
    let Some(packet_at) = memory.try_alloc(packet.len()) else {
        memory.free(kernargs);
        return Err(fail("no memory left for the dispatch packet".into()));
    };
    memory.write(packet_at, &packet);
    let Some(queue_at) = memory.try_alloc(256) else {
        memory.free(kernargs);
        memory.free(packet_at);
        return Err(fail("no memory left for the queue".into()));
    };
    let at = Addresses {
        kernargs,
        packet: packet_at,
        queue: queue_at,
    };
    let report = run_grid(co, cache, k, launch, at, memory);
    for a in [kernargs, packet_at, queue_at] {
        memory.free(a);
    }
    report
}

/// Where a dispatch's kernel arguments, packet and queue are.
#[derive(Clone, Copy)]
struct Addresses {
    kernargs: u64,
    packet: u64,
    queue: u64,
}

/// The AQL dispatch packet of a launch (HSA's `hsa_kernel_dispatch_packet_t`).
fn dispatch_packet(k: &KernelInfo, launch: &Launch, kernargs: u64) -> Vec<u8> {
    let mut p = vec![0u8; 64];
    // header: a kernel dispatch packet (type 2)
    p[0..2].copy_from_slice(&2u16.to_le_bytes());
    let dims = launch
        .grid
        .iter()
        .rposition(|&g| g > 1)
        .map_or(1, |d| d + 1) as u16;
    p[2..4].copy_from_slice(&dims.to_le_bytes());
    for d in 0..3 {
        p[4 + 2 * d..6 + 2 * d].copy_from_slice(&(launch.block[d] as u16).to_le_bytes());
        p[12 + 4 * d..16 + 4 * d].copy_from_slice(&launch.grid[d].to_le_bytes());
    }
    p[24..28].copy_from_slice(&k.descriptor.private_segment_fixed_size.to_le_bytes());
    let group = k.descriptor.group_segment_fixed_size + launch.dynamic_lds;
    p[28..32].copy_from_slice(&group.to_le_bytes());
    p[32..40].copy_from_slice(&k.descriptor_address.to_le_bytes());
    p[40..48].copy_from_slice(&kernargs.to_le_bytes());
    p
}

fn run_grid(
    co: &CodeObject,
    cache: &DecodeCache,
    k: &KernelInfo,
    launch: &Launch,
    at: Addresses,
    memory: &Memory,
) -> ExecResult<Report> {
    let blocks = [0, 1, 2].map(|i| launch.grid[i].div_ceil(launch.block[i].max(1)));
    let total = blocks.iter().map(|&b| u64::from(b)).product::<u64>();
    let workgroup = |index: u64, waves: &mut Vec<Wave>| -> ExecResult<(u64, u64)> {
        let bx = (index % u64::from(blocks[0])) as u32;
        let by = (index / u64::from(blocks[0]) % u64::from(blocks[1])) as u32;
        let bz = (index / (u64::from(blocks[0]) * u64::from(blocks[1]))) as u32;
        run_one_workgroup(co, cache, k, launch, at, memory, [bx, by, bz], waves)
    };
    let threads = (launch.threads.max(1) as u64).min(total) as usize;
    let mut report = Report::default();
    if threads <= 1 {
        let mut pool = Vec::new();
        for index in 0..total {
            let (steps, waves) = workgroup(index, &mut pool)?;
            report.wave_instructions += steps;
            report.waves += waves;
            report.workgroups += 1;
        }
        return Ok(report);
    }
    // workgroups handed out one at a time; the first failure (by workgroup) is the answer
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<(Report, Option<(u64, ExecError)>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Report::default();
                    let mut pool = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= total || failed.load(Ordering::Relaxed) {
                            return (mine, None);
                        }
                        match workgroup(index, &mut pool) {
                            Ok((steps, waves)) => {
                                mine.wave_instructions += steps;
                                mine.waves += waves;
                                mine.workgroups += 1;
                            }
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return (mine, Some((index, e)));
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| match w.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let mut first: Option<(u64, ExecError)> = None;
    for (r, e) in results {
        report.wave_instructions += r.wave_instructions;
        report.waves += r.waves;
        report.workgroups += r.workgroups;
        if let Some((index, e)) = e {
            if first.as_ref().is_none_or(|(i, _)| index < *i) {
                first = Some((index, e));
            }
        }
    }
    match first {
        Some((_, e)) => Err(e),
        None => Ok(report),
    }
}

/// Runs the workgroup at `id` (its x, y, z) to its end: (wave-instructions, waves). `waves`
/// holds the previous workgroup's waves of this dispatch, reused with their registers zeroed.
#[allow(clippy::too_many_arguments)]
fn run_one_workgroup(
    co: &CodeObject,
    cache: &DecodeCache,
    k: &KernelInfo,
    launch: &Launch,
    at: Addresses,
    memory: &Memory,
    id: [u32; 3],
    waves: &mut Vec<Wave>,
) -> ExecResult<(u64, u64)> {
    let threads: u32 = launch.block.iter().product();
    let d = &k.descriptor;
    let lanes = k.wavefront_size as usize;
    let count = (threads as usize).div_ceil(lanes);
    let vgprs = (k.vgpr_count as usize).max(1) + 8;
    let private_size = d.private_segment_fixed_size.next_multiple_of(16) as usize;
    if waves.len() != count {
        waves.clear();
        waves.extend((0..count).map(|_| Wave {
            lanes,
            s: [0; 128],
            v: vec![vec![0; lanes]; vgprs],
            scc: false,
            pc: k.entry,
            done: false,
            at_barrier: false,
            private: vec![0; lanes * private_size],
            private_size,
            a: vec![vec![0; lanes]; k.agpr_count as usize],
        }));
    }
    for (w, wave) in waves.iter_mut().enumerate() {
        wave.reset(k.entry);
        // user SGPRs in the descriptor's order, then the workgroup ids
        let mut next = 0usize;
        for u in d.user_sgprs() {
            let pair = match u {
                UserSgpr::KernargSegmentPtr => Some(at.kernargs),
                UserSgpr::DispatchPtr => Some(at.packet),
                UserSgpr::QueuePtr => Some(at.queue),
                UserSgpr::DispatchId => Some(0),
                _ => None,
            };
            if let Some(v) = pair {
                wave.s[next] = v as u32;
                wave.s[next + 1] = (v >> 32) as u32;
            }
            if u == UserSgpr::PrivateSegmentSize {
                wave.s[next] = private_size as u32;
            }
            next += u.count() as usize;
        }
        let mut next = d.user_sgpr_count() as usize;
        for (dim, on) in d.workgroup_ids().into_iter().enumerate() {
            if on {
                wave.s[next] = id[dim];
                next += 1;
            }
        }
        // work-item ids packed in v0; lanes past the block are off
        let mut exec = 0u64;
        for lane in 0..lanes {
            let t = w * lanes + lane;
            if t >= threads as usize {
                continue;
            }
            exec |= 1 << lane;
            let x = t as u32 % launch.block[0];
            let y = t as u32 / launch.block[0] % launch.block[1];
            let z = t as u32 / (launch.block[0] * launch.block[1]);
            wave.v[0][lane] = x | (y << 10) | (z << 20);
        }
        wave.set_exec(exec);
    }
    let mut lds = vec![0u8; (d.group_segment_fixed_size + launch.dynamic_lds) as usize];
    let mut ctx = Context {
        arch: co.arch,
        step_limit: launch.step_limit.unwrap_or(STEP_LIMIT),
        memory,
        kernel: &k.name,
        lds: &mut lds,
        trace: (launch.trace && id == [0, 0, 0]).then_some(launch.trace_lane),
    };
    run_workgroup(co, waves, &mut ctx, cache, launch.schedule)
}

/// Instructions decoded once, by their word index in `.text` (shared by the threads of a
/// dispatch).
#[derive(Debug)]
struct DecodeCache {
    text: (u64, u64),
    slots: Vec<std::sync::OnceLock<(Instruction, ops::Plan)>>,
}

impl DecodeCache {
    fn new(co: &CodeObject) -> Self {
        let n = ((co.text.1 - co.text.0) / 4) as usize;
        DecodeCache {
            text: co.text,
            slots: (0..n).map(|_| std::sync::OnceLock::new()).collect(),
        }
    }

    fn get(&self, co: &CodeObject, pc: u64) -> ExecResult<(Instruction, ops::Plan)> {
        let slot = pc
            .checked_sub(self.text.0)
            .map(|d| (d / 4) as usize)
            .filter(|&i| pc < self.text.1 && pc % 4 == 0 && i < self.slots.len());
        let Some(i) = slot else {
            // a branch out of the code: nothing there to run
            return Err(crate::Error::Undecodable {
                arch: co.arch.name(),
                address: pc,
                words: "outside .text".into(),
            }
            .into());
        };
        if let Some(decoded) = self.slots[i].get() {
            return Ok(*decoded);
        }
        let inst = decode(co.arch, &co.image, pc as usize, 0)?;
        Ok(*self.slots[i].get_or_init(|| (inst, ops::Plan::of(&inst))))
    }
}

/// The waves of one workgroup, each in turn until it ends or waits at a barrier; a barrier
/// opens when every wave that has not ended waits at it.
fn run_workgroup(
    co: &CodeObject,
    waves: &mut [Wave],
    ctx: &mut Context<'_>,
    cache: &DecodeCache,
    schedule: Schedule,
) -> ExecResult<(u64, u64)> {
    let mut steps = 0u64;
    let mut order: Vec<usize> = (0..waves.len()).collect();
    let mut rng = match schedule {
        Schedule::Shuffled(seed) => seed | 1,
        _ => 0,
    };
    if schedule == Schedule::Reversed {
        order.reverse();
    }
    loop {
        if let Schedule::Shuffled(_) = schedule {
            // xorshift64: a new order each round
            for i in (1..order.len()).rev() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                order.swap(i, (rng % (i as u64 + 1)) as usize);
            }
        }
        for &i in &order {
            if !waves[i].done {
                let trace = ctx.trace;
                if i != 0 {
                    ctx.trace = None;
                }
                let ran = run_wave(co, &mut waves[i], ctx, cache);
                ctx.trace = trace;
                steps += ran?;
            }
        }
        let waiting = waves.iter().filter(|w| w.at_barrier).count();
        let running = waves.iter().filter(|w| !w.done).count();
        if running == 0 {
            return Ok((steps, waves.len() as u64));
        }
        if waiting != running {
            let at = waves.iter().find(|w| !w.done).map_or(0, |w| w.pc);
            return Err(ExecError::Barrier {
                kernel: ctx.kernel.to_string(),
                address: at,
            });
        }
        for w in waves.iter_mut() {
            w.at_barrier = false;
        }
    }
}

fn run_wave(
    co: &CodeObject,
    wave: &mut Wave,
    ctx: &mut Context<'_>,
    cache: &DecodeCache,
) -> ExecResult<u64> {
    let mut steps = 0u64;
    while !wave.done && !wave.at_barrier {
        steps += 1;
        if steps > ctx.step_limit {
            return Err(ExecError::StepLimit {
                kernel: ctx.kernel.to_string(),
                limit: ctx.step_limit,
                address: wave.pc,
            });
        }
        let (inst, plan) = cache.get(co, wave.pc)?;
        let next = wave.pc + inst.len as u64;
        let before = ctx.trace.map(|lane| {
            let v: Vec<u32> = wave.v.iter().map(|r| r[lane.min(wave.lanes - 1)]).collect();
            (v, wave.s, wave.scc)
        });
        let flow = ops::execute(wave, &inst, &plan, ctx)?;
        if let (Some((v, s, scc)), Some(lane)) = (before, ctx.trace) {
            let lane = lane.min(wave.lanes - 1);
            let text = crate::decode::print::text(co.arch, &inst)
                .unwrap_or_else(|| inst.mnemonic.to_string());
            let mut changed = String::new();
            for (i, old) in v.iter().enumerate() {
                if wave.v[i][lane] != *old {
                    changed += &format!(" v{i}={:#x}", wave.v[i][lane]);
                }
            }
            for (i, old) in s.iter().enumerate() {
                if wave.s[i] != *old {
                    changed += &format!(" s{i}={:#x}", wave.s[i]);
                }
            }
            if wave.scc != scc {
                changed += &format!(" scc={}", u8::from(wave.scc));
            }
            eprintln!("{:#08x} {text:<60}{changed}", inst.address);
        }
        match flow {
            Flow::Next => wave.pc = next,
            Flow::Branch(by) => wave.pc = next.wrapping_add_signed(by),
            Flow::End => wave.done = true,
            Flow::Barrier => {
                wave.pc = next;
                wave.at_barrier = true;
            }
        }
    }
    Ok(steps)
}
