//! A communicator: one rank of a group of devices (one per process or thread), the
//! collectives on the device's stream, and a watchdog that turns a stalled collective (a peer
//! that died or stopped calling) into an error instead of a hang.
//!
//! One file: the collectives, the watchdog and the error paths share one state (the in-flight
//! collectives a stalled peer turns into errors).

use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rocm_device::{DType, Device, Event, Operand};

use crate::error::{Error, Result};
use crate::library::{abi, CclLib, RawComm, UniqueId};

/// A reduction of the collective library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// The sum divided by the number of ranks (floating-point dtypes).
    Avg,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    /// Avg is defined on floating-point dtypes only (the libraries' integer mean truncates).
    fn check(self, op: &'static str, dtype: DType) -> Result<()> {
        if self == ReduceOp::Avg && !dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype,
                why: " for Avg (floating-point dtypes only)",
            });
        }
        Ok(())
    }

    fn raw(self) -> u32 {
        match self {
            ReduceOp::Sum => abi::NCCL_SUM,
            ReduceOp::Prod => abi::NCCL_PROD,
            ReduceOp::Max => abi::NCCL_MAX,
            ReduceOp::Min => abi::NCCL_MIN,
            ReduceOp::Avg => abi::NCCL_AVG,
        }
    }
}

/// The library's type for `dtype` when values are reduced (`None` for data movement only:
/// the elements then move as bytes).
fn reduce_type(op: &'static str, dtype: DType) -> Result<u32> {
    Ok(match dtype {
        DType::U8 => abi::NCCL_UINT8,
        DType::U32 => abi::NCCL_UINT32,
        DType::I32 => abi::NCCL_INT32,
        DType::I64 => abi::NCCL_INT64,
        DType::F16 => abi::NCCL_FLOAT16,
        DType::BF16 => abi::NCCL_BFLOAT16,
        DType::F32 => abi::NCCL_FLOAT32,
        DType::F64 => abi::NCCL_FLOAT64,
        DType::I16 => {
            return Err(Error::UnsupportedDType {
                op,
                dtype,
                why:
                    " for reductions (NCCL and RCCL have no 16-bit integer type; it moves as bytes)",
            })
        }
        DType::F8E4M3 => {
            return Err(Error::UnsupportedDType {
                op,
                dtype,
                why: " for reductions (RCCL's fp8 on CDNA3 is the fnuz variant, not Candle's \
                      OCP e4m3; it moves as bytes)",
            })
        }
    })
}

/// Elements of `dtype` as the library's (type, count) for data movement: reducible types as
/// themselves, the others as bytes.
fn move_type(dtype: DType, count: usize) -> (u32, usize) {
    match reduce_type("move", dtype) {
        Ok(t) => (t, count),
        Err(_) => (abi::NCCL_UINT8, count * dtype.size_in_bytes()),
    }
}

/// The raw handle, shared with the watchdog thread.
#[derive(Clone, Copy)]
struct Handle(RawComm);
// SAFETY: NCCL/RCCL communicators may be used from any thread; the crate serialises nothing
// the library does not (the watchdog only queries and aborts, which the library allows
// concurrently with other calls).
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

/// What the communicator and its watchdog share.
struct Shared {
    lib: &'static CclLib,
    handle: Handle,
    rank: usize,
    size: usize,
    timeout: Duration,
    /// Set (first) when the communicator is aborted; no call starts after it.
    aborted: AtomicBool,
    /// Calls into the library in progress on user threads.
    in_call: AtomicUsize,
    reason: Mutex<Option<String>>,
    /// Collectives queued and not yet seen complete: an event after each, the time queued.
    queue: Mutex<VecDeque<(Event, Instant, &'static str)>>,
    /// Signals the watchdog (work queued, closing) and waiters (queue drained, aborted).
    changed: Condvar,
    closing: AtomicBool,
    spare_events: Mutex<Vec<Event>>,
}

impl Shared {
    /// Aborts the communicator once; `reason` says why.
    fn abort(&self, reason: String) {
        if self.aborted.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(
            "aborting communicator (rank {} of {}): {reason}",
            self.rank,
            self.size
        );
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        // A call that read `aborted` as false just before it was set is about to start or is
        // running: give it a moment to return (a call stuck on a dead peer is what the abort
        // must unblock, so the wait is bounded).
        let grace = Instant::now() + Duration::from_secs(1);
        while self.in_call.load(Ordering::SeqCst) > 0 && Instant::now() < grace {
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: the handle is live (never destroyed while the watchdog runs); abort may be
        // called while another thread's call is blocked in the library.
        let code = unsafe { (self.lib.comm_abort)(self.handle.0) };
        if let Err(e) = self.lib.check("ncclCommAbort", code, None) {
            tracing::warn!("{e}");
        }
        self.changed.notify_all();
    }

    fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// The library's asynchronous error for this communicator, if any.
    fn async_error(&self) -> Option<String> {
        let mut code = abi::NCCL_SUCCESS;
        // SAFETY: a live communicator, valid out-pointer.
        let call = unsafe { (self.lib.comm_get_async_error)(self.handle.0, &mut code) };
        if let Err(e) = self.lib.check("ncclCommGetAsyncError", call, None) {
            return Some(e.to_string());
        }
        if code == abi::NCCL_SUCCESS || code == abi::NCCL_IN_PROGRESS {
            return None;
        }
        self.lib
            .check(
                "a collective (asynchronous error)",
                code,
                Some(self.handle.0),
            )
            .err()
            .map(|e| e.to_string())
    }

    /// The watchdog: follows the queued collectives in order; aborts when one has made no
    /// progress within the timeout or the library reports an asynchronous error.
    fn watch(self: Arc<Self>) {
        loop {
            let front = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if self.aborted.load(Ordering::SeqCst) {
                        queue.clear();
                        self.changed.notify_all();
                        return;
                    }
                    if let Some((_, queued, op)) = queue.front() {
                        break (*queued, *op);
                    }
                    if self.closing.load(Ordering::SeqCst) {
                        return;
                    }
                    queue = self
                        .changed
                        .wait_timeout(queue, Duration::from_millis(100))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            };
            let (queued, op) = front;
            let done = {
                let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                queue.front().map(|(e, _, _)| e.query())
            };
            match done {
                Some(Ok(true)) => {
                    let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some((event, _, _)) = queue.pop_front() {
                        self.spare_events
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(event);
                    }
                    if queue.is_empty() {
                        self.changed.notify_all();
                    }
                }
                Some(Err(e)) => self.abort(format!("{op}: the device reported {e}")),
                None | Some(Ok(false)) => {
                    if let Some(e) = self.async_error() {
                        self.abort(format!("{op}: {e}"));
                    } else if queued.elapsed() > self.timeout {
                        self.abort(format!(
                            "{op}: rank {} of {} saw no progress for {:.1} s",
                            self.rank,
                            self.size,
                            queued.elapsed().as_secs_f64()
                        ));
                    } else {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }
        }
    }
}

/// Seconds a collective may make no progress before its communicator is aborted.
pub const TIMEOUT_ENV: &str = "CANDLE_ROCM_CCL_TIMEOUT";
/// The timeout where [`TIMEOUT_ENV`] sets none: long enough for a first kernel compile or a
/// slow peer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a collective may make no progress before the communicator is aborted, as `lookup`
/// (a variable name to its value) says: [`TIMEOUT_ENV`] seconds, a positive number, else
/// [`DEFAULT_TIMEOUT`].
pub fn timeout_from(lookup: impl Fn(&str) -> Option<String>) -> Duration {
    lookup(TIMEOUT_ENV)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
}

/// [`timeout_from`] the process's environment, read once.
pub fn default_timeout() -> Duration {
    static GLOBAL: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *GLOBAL.get_or_init(|| timeout_from(rocm_device::config::env_lookup))
}

/// One rank of a communicator on one device.
pub struct Comm {
    shared: Arc<Shared>,
    device: Device,
    watchdog: Option<std::thread::JoinHandle<()>>,
    /// Open [`Comm::group`]s: calls inside one are queued by the library at its end, so
    /// the watchdog follows the group as a whole.
    group_depth: AtomicUsize,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Comm(rank {} of {} on {:?})",
            self.shared.rank, self.shared.size, self.device
        )
    }
}

/// A fresh unique id from `device`'s platform's library (rank 0 makes it).
pub fn unique_id(device: &Device) -> Result<UniqueId> {
    let lib = CclLib::get(device.info().platform)?;
    device.bind_to_thread()?;
    lib.unique_id()
}

impl Comm {
    /// Joins the communicator `id` as `rank` of `size` on `device` (every rank calls this;
    /// it returns once all have). Collectives that make no progress for `timeout` abort it.
    pub fn init(
        device: &Device,
        id: &UniqueId,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Self> {
        if size == 0 || rank >= size || size > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                op: "init",
                detail: format!("rank {rank} of {size}"),
            });
        }
        let lib = CclLib::get(device.info().platform)?;
        device.bind_to_thread()?;
        let mut raw: RawComm = std::ptr::null_mut();
        let _span = tracing::debug_span!("ccl init", rank, size).entered();
        // SAFETY: valid out-pointer; the id is passed by value as the header declares.
        let code = unsafe { (lib.comm_init_rank)(&mut raw, size as c_int, *id, rank as c_int) };
        lib.check("ncclCommInitRank", code, None)?;
        let shared = Arc::new(Shared {
            lib,
            handle: Handle(raw),
            rank,
            size,
            timeout,
            aborted: AtomicBool::new(false),
            in_call: AtomicUsize::new(0),
            reason: Mutex::new(None),
            queue: Mutex::new(VecDeque::new()),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
            spare_events: Mutex::new(Vec::new()),
        });
        let watcher = shared.clone();
        let watchdog = std::thread::Builder::new()
            .name(format!("ccl-watchdog-{rank}"))
            .spawn(move || watcher.watch())
            .map_err(|e| Error::InvalidArgument {
                op: "init",
                detail: format!("no watchdog thread: {e}"),
            });
        let watchdog = match watchdog {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                unsafe { (lib.comm_destroy)(raw) };
                return Err(e);
            }
        };
        let comm = Comm {
            shared,
            device: device.clone(),
            watchdog: Some(watchdog),
            group_depth: AtomicUsize::new(0),
        };
        // The library's view must be ours.
        let (mut n, mut r): (c_int, c_int) = (0, 0);
        // SAFETY: a live communicator, valid out-pointers.
        let code = unsafe { (lib.comm_count)(raw, &mut n) };
        lib.check("ncclCommCount", code, Some(raw))?;
        // SAFETY: as above.
        let code = unsafe { (lib.comm_user_rank)(raw, &mut r) };
        lib.check("ncclCommUserRank", code, Some(raw))?;
        if (n as usize, r as usize) != (size, rank) {
            return Err(Error::InvalidArgument {
                op: "init",
                detail: format!("the library reports rank {r} of {n}, asked for {rank} of {size}"),
            });
        }
        Ok(comm)
    }

    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    pub fn size(&self) -> usize {
        self.shared.size
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the communicator was aborted (by the watchdog or [`Comm::abort`]).
    pub fn is_aborted(&self) -> bool {
        self.shared.aborted.load(Ordering::SeqCst)
    }

    /// Aborts the communicator: pending collectives end with errors on every rank that waits
    /// for this one.
    pub fn abort(&self, reason: &str) {
        self.shared.abort(reason.to_string());
    }

    /// Waits until every collective queued so far is complete, or the communicator is
    /// aborted (then an error saying why).
    pub fn wait(&self) -> Result<()> {
        let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.is_aborted() {
                return Err(Error::Aborted {
                    op: "wait",
                    reason: self.shared.reason(),
                });
            }
            if queue.is_empty() {
                return Ok(());
            }
            queue = self
                .shared
                .changed
                .wait_timeout(queue, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn check_operand(&self, op: &'static str, what: &str, x: &Operand<'_>) -> Result<u64> {
        if !x.buffer.device().same_device(&self.device) {
            return Err(rocm_device::Error::DeviceMismatch {
                op,
                left: format!("{:?}", self.device),
                right: format!("the {what} buffer on {:?}", x.buffer.device()),
            }
            .into());
        }
        if !x.layout.is_contiguous() {
            return Err(Error::InvalidArgument {
                op,
                detail: format!("the {what} is not contiguous (layout {:?})", x.layout),
            });
        }
        let bytes = x.elem_count() * x.dtype.size_in_bytes();
        let start = x.layout.start * x.dtype.size_in_bytes();
        if start + bytes > x.buffer.len() {
            return Err(rocm_device::Error::SizeMismatch {
                op,
                detail: format!(
                    "the {what} reaches byte {} of a {}-byte buffer",
                    start + bytes,
                    x.buffer.len()
                ),
            }
            .into());
        }
        Ok(x.buffer.device_ptr() + start as u64)
    }

    fn same_dtype(op: &'static str, a: &Operand<'_>, b: &Operand<'_>) -> Result<()> {
        if a.dtype != b.dtype {
            return Err(rocm_device::Error::DTypeMismatch {
                op,
                detail: format!("send {} and receive {}", a.dtype, b.dtype),
            }
            .into());
        }
        Ok(())
    }

    fn counts(op: &'static str, detail: String) -> Error {
        Error::InvalidArgument { op, detail }
    }

    /// Runs one library call on the device's stream, then queues its completion for the
    /// watchdog.
    fn call(
        &self,
        op: &'static str,
        f: impl FnOnce(RawComm, *mut std::ffi::c_void) -> u32,
    ) -> Result<()> {
        self.enter(op, |raw, stream| {
            let code = f(raw, stream);
            self.shared.lib.check(op, code, Some(raw))
        })?;
        if self.group_depth.load(Ordering::SeqCst) > 0 {
            return Ok(());
        }
        self.track(op)
    }

    /// `f` with the live handle and stream; refused once aborted.
    fn enter<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(RawComm, *mut std::ffi::c_void) -> Result<T>,
    ) -> Result<T> {
        let s = &self.shared;
        s.in_call.fetch_add(1, Ordering::SeqCst);
        let out = if s.aborted.load(Ordering::SeqCst) {
            Err(Error::Aborted {
                op,
                reason: s.reason(),
            })
        } else {
            self.device
                .bind_to_thread()
                .map_err(Error::from)
                .and_then(|()| f(s.handle.0, self.device.raw_stream()))
        };
        s.in_call.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// Records an event after the queued collective and hands it to the watchdog. Under a
    /// graph capture nothing runs yet: the collective is recorded into the graph, and its
    /// replays are not followed.
    fn track(&self, op: &'static str) -> Result<()> {
        if self.device.is_capturing() {
            return Ok(());
        }
        let spare = self
            .shared
            .spare_events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let event = match spare {
            Some(e) => e,
            None => self.device.create_event()?,
        };
        event.record(self.device.stream())?;
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back((event, Instant::now(), op));
        self.shared.changed.notify_all();
        Ok(())
    }

    /// The one-rank Avg workaround: the libraries' one-rank Avg kernel left the tail of
    /// counts that are not a multiple of its block unwritten before NCCL 2.29.7
    /// (NVIDIA/nccl#1950; RCCL took the fix later). The average over one rank is its input,
    /// so it is copied here (nothing in place) instead. Every other one-rank collective goes
    /// to the library.
    fn one_rank_avg(&self, op: &'static str, src: &Operand<'_>, dst: &Operand<'_>) -> Result<()> {
        let width = src.dtype.size_in_bytes();
        let (from, to) = (src.layout.start * width, dst.layout.start * width);
        let bytes = dst.elem_count() * width;
        let in_place = src.buffer.device_ptr() + from as u64 == dst.buffer.device_ptr() + to as u64;
        // through `enter`, so that an aborted communicator refuses it like any call
        self.enter(op, |_, _| {
            if in_place {
                return Ok(());
            }
            self.device
                .copy_dtod(src.buffer, from, dst.buffer, to, bytes)
                .map_err(Error::from)
        })
    }

    /// The checks of a reduction whose send and receive hold the same count: the library's
    /// type, both addresses and the count (`None` for the one-rank Avg, done by
    /// [`Comm::one_rank_avg`]).
    fn equal_reduction(
        &self,
        op_name: &'static str,
        src: &Operand<'_>,
        dst: &Operand<'_>,
        op: ReduceOp,
    ) -> Result<Option<(u32, u64, u64, usize)>> {
        Self::same_dtype(op_name, src, dst)?;
        let ty = reduce_type(op_name, src.dtype)?;
        op.check(op_name, src.dtype)?;
        let (s, d) = (
            self.check_operand(op_name, "send", src)?,
            self.check_operand(op_name, "receive", dst)?,
        );
        let n = src.elem_count();
        if dst.elem_count() != n {
            return Err(Self::counts(
                op_name,
                format!("send {n} elements, receive {}", dst.elem_count()),
            ));
        }
        if self.size() == 1 && op == ReduceOp::Avg {
            self.one_rank_avg(op_name, src, dst)?;
            return Ok(None);
        }
        Ok(Some((ty, s, d, n)))
    }

    /// `dst = op(src over all ranks)`; `src` and `dst` may be the same (in place).
    pub fn all_reduce(&self, src: Operand<'_>, dst: Operand<'_>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        let Some((ty, s, d, n)) = self.equal_reduction(OP, &src, &dst, op)? else {
            return Ok(());
        };
        // both ranges hold `n` elements of the type on this device.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe { (self.shared.lib.all_reduce)(s as _, d as _, n, ty, op.raw(), raw, stream) }
        })
    }

    /// `dst = op(src over all ranks)` on `root` only (`dst` is not written elsewhere).
    pub fn reduce(
        &self,
        src: Operand<'_>,
        dst: Operand<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "reduce";
        self.check_root(OP, root)?;
        let Some((ty, s, d, n)) = self.equal_reduction(OP, &src, &dst, op)? else {
            return Ok(());
        };
        // both ranges hold `n` elements of the type.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe {
                (self.shared.lib.reduce)(
                    s as _,
                    d as _,
                    n,
                    ty,
                    op.raw(),
                    root as c_int,
                    raw,
                    stream,
                )
            }
        })
    }

    /// `dst = src of root` on every rank (`src` is read on `root` only).
    pub fn broadcast(&self, src: Operand<'_>, dst: Operand<'_>, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        Self::same_dtype(OP, &src, &dst)?;
        self.check_root(OP, root)?;
        let (s, d) = (
            self.check_operand(OP, "send", &src)?,
            self.check_operand(OP, "receive", &dst)?,
        );
        if dst.elem_count() != src.elem_count() {
            return Err(Self::counts(
                OP,
                format!(
                    "send {} elements, receive {}",
                    src.elem_count(),
                    dst.elem_count()
                ),
            ));
        }
        let (ty, n) = move_type(src.dtype, src.elem_count());
        // both ranges hold `n` elements of `ty`.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe {
                (self.shared.lib.broadcast)(s as _, d as _, n, ty, root as c_int, raw, stream)
            }
        })
    }

    /// `dst` = every rank's `src` in rank order (`dst` holds size x the elements of `src`).
    pub fn all_gather(&self, src: Operand<'_>, dst: Operand<'_>) -> Result<()> {
        const OP: &str = "all_gather";
        Self::same_dtype(OP, &src, &dst)?;
        let (s, d) = (
            self.check_operand(OP, "send", &src)?,
            self.check_operand(OP, "receive", &dst)?,
        );
        if dst.elem_count() != src.elem_count() * self.size() {
            return Err(Self::counts(
                OP,
                format!(
                    "receive {} elements, must be {} ranks x {} sent",
                    dst.elem_count(),
                    self.size(),
                    src.elem_count()
                ),
            ));
        }
        let (ty, n) = move_type(src.dtype, src.elem_count());
        // `src` holds `n`, `dst` size x `n` elements of `ty`.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe { (self.shared.lib.all_gather)(s as _, d as _, n, ty, raw, stream) }
        })
    }

    /// `dst` = this rank's block of `op(src over all ranks)` (`src` holds size blocks).
    pub fn reduce_scatter(&self, src: Operand<'_>, dst: Operand<'_>, op: ReduceOp) -> Result<()> {
        const OP: &str = "reduce_scatter";
        Self::same_dtype(OP, &src, &dst)?;
        let ty = reduce_type(OP, src.dtype)?;
        op.check(OP, src.dtype)?;
        let (s, d) = (
            self.check_operand(OP, "send", &src)?,
            self.check_operand(OP, "receive", &dst)?,
        );
        let n = dst.elem_count();
        if src.elem_count() != n * self.size() {
            return Err(Self::counts(
                OP,
                format!(
                    "send {} elements, must be {} ranks x {n} received",
                    src.elem_count(),
                    self.size()
                ),
            ));
        }
        if self.size() == 1 && op == ReduceOp::Avg {
            return self.one_rank_avg(OP, &src, &dst);
        }
        // `dst` holds `n`, `src` size x `n` elements of the type.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe {
                (self.shared.lib.reduce_scatter)(s as _, d as _, n, ty, op.raw(), raw, stream)
            }
        })
    }

    /// Sends `src` to `peer` (matched by the peer's `recv`; pair them inside [`Comm::group`]
    /// when both sides send).
    pub fn send(&self, src: Operand<'_>, peer: usize) -> Result<()> {
        const OP: &str = "send";
        self.check_peer(OP, peer)?;
        let s = self.check_operand(OP, "send", &src)?;
        let (ty, n) = move_type(src.dtype, src.elem_count());
        // `src` holds `n` elements of `ty`.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe { (self.shared.lib.send)(s as _, n, ty, peer as c_int, raw, stream) }
        })
    }

    /// Receives into `dst` from `peer`.
    pub fn recv(&self, dst: Operand<'_>, peer: usize) -> Result<()> {
        const OP: &str = "recv";
        self.check_peer(OP, peer)?;
        let d = self.check_operand(OP, "receive", &dst)?;
        let (ty, n) = move_type(dst.dtype, dst.elem_count());
        // `dst` holds `n` elements of `ty`.
        self.call(OP, |raw, stream| {
            // SAFETY: the addresses and counts were checked against their buffers on this
            // device above; the handle and stream are live (`enter`).
            unsafe { (self.shared.lib.recv)(d as _, n, ty, peer as c_int, raw, stream) }
        })
    }

    /// Block `j` of `src` goes to rank `j`; block `i` of `dst` comes from rank `i` (blocks of
    /// elements / size elements), as grouped sends and receives.
    pub fn all_to_all(&self, src: Operand<'_>, dst: Operand<'_>) -> Result<()> {
        const OP: &str = "all_to_all";
        Self::same_dtype(OP, &src, &dst)?;
        let (s, d) = (
            self.check_operand(OP, "send", &src)?,
            self.check_operand(OP, "receive", &dst)?,
        );
        let n = src.elem_count();
        if dst.elem_count() != n || n % self.size() != 0 {
            return Err(Self::counts(
                OP,
                format!(
                    "send {n} and receive {} elements: equal and divisible by {} ranks",
                    dst.elem_count(),
                    self.size()
                ),
            ));
        }
        let (ty, block) = move_type(src.dtype, n / self.size());
        let block_bytes = (n / self.size() * src.dtype.size_in_bytes()) as u64;
        let lib = self.shared.lib;
        self.group(|| {
            for peer in 0..self.size() {
                let offset = peer as u64 * block_bytes;
                // each block lies inside its checked range.
                self.call(OP, |raw, stream| {
                    // SAFETY: the addresses and counts were checked against their buffers on this
                    // device above; the handle and stream are live (`enter`).
                    unsafe { (lib.send)((s + offset) as _, block, ty, peer as c_int, raw, stream) }
                })?;
                self.call(OP, |raw, stream| {
                    // SAFETY: the addresses and counts were checked against their buffers on this
                    // device above; the handle and stream are live (`enter`).
                    unsafe { (lib.recv)((d + offset) as _, block, ty, peer as c_int, raw, stream) }
                })?;
            }
            Ok(())
        })
    }

    /// Runs `f`'s calls as one group (the library starts them together: sends and receives
    /// that depend on each other, several collectives fused).
    pub fn group<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let lib = self.shared.lib;
        // SAFETY: group calls take no arguments; nesting is the library's to count.
        lib.check("ncclGroupStart", unsafe { (lib.group_start)() }, None)?;
        self.group_depth.fetch_add(1, Ordering::SeqCst);
        let out = f();
        let outer = self.group_depth.fetch_sub(1, Ordering::SeqCst) == 1;
        // the group must be closed whatever `f` returned
        let end = self.enter("group", |raw, _| {
            // SAFETY: closes the group opened above; takes no arguments.
            let code = unsafe { (lib.group_end)() };
            lib.check("ncclGroupEnd", code, Some(raw))
        });
        let value = out?;
        end?;
        if outer {
            self.track("group")?;
        }
        Ok(value)
    }

    fn check_root(&self, op: &'static str, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(Error::InvalidArgument {
                op,
                detail: format!("root {root} of {} ranks", self.size()),
            });
        }
        Ok(())
    }

    fn check_peer(&self, op: &'static str, peer: usize) -> Result<()> {
        if peer >= self.size() {
            return Err(Error::InvalidArgument {
                op,
                detail: format!("peer {peer} of {} ranks", self.size()),
            });
        }
        Ok(())
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // The watchdog follows what is queued to its end (or aborts), then stops.
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        if !self.is_aborted() {
            let lib = self.shared.lib;
            // SAFETY: the handle is live (not aborted) and destroyed once; the watchdog is gone.
            let code = unsafe { (lib.comm_destroy)(self.shared.handle.0) };
            if let Err(e) = lib.check("ncclCommDestroy", code, None) {
                tracing::warn!("{e}");
            }
        }
    }
}

#[cfg(test)]
mod timeout_tests {
    use super::*;
    use rocm_device::config::lookup_in;

    #[test]
    fn the_timeout_comes_from_its_variable() {
        assert_eq!(timeout_from(lookup_in(&[])), DEFAULT_TIMEOUT);
        let t = timeout_from(lookup_in(&[(TIMEOUT_ENV, " 2.5 ")]));
        assert_eq!(t, Duration::from_millis(2500));
        for bad in ["-1", "0", "inf", "soon"] {
            assert_eq!(
                timeout_from(lookup_in(&[(TIMEOUT_ENV, bad)])),
                DEFAULT_TIMEOUT
            );
        }
    }
}
