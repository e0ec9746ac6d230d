//! MIOpen through its table in `rocm_device::sys` (functions, enum values and structs,
//! checked against the ROCm headers in the AMD tier): handles, descriptors and plans.
//!
//! The call sequence (miopen.h of ROCm 6.4):
//! - `miopenCreateWithStream`: one handle per device, on the device's stream.
//! - descriptors: `miopenSetTensorDescriptor` (packed NCHW), `miopenInitConvolutionNdDescriptor`
//!   (2 spatial dims; a 1-D convolution has a unit height) and `miopenSetConvolutionGroupCount`,
//!   `miopenSet2dPoolingDescriptor`. Before a plan is used, `miopenGetConvolutionForwardOutputDim`
//!   must give the dims we computed (for a transposed convolution: the forward convolution of
//!   the output must give the input), so a descriptor mistake is an error, not a wrong write.
//! - convolution, immediate mode (the default): `miopenConvolutionForwardGetSolutionCount`,
//!   `...GetSolution` (best first), `...CompileSolution`, then `...ForwardImmediate` with a
//!   workspace of the solution's size from the device pool. A transposed convolution is the
//!   backward-data pass of the convolution whose input is our output (PyTorch's MIOpen path
//!   does the same): the `miopenConvolutionBackwardData...` counterparts.
//! - find mode (`CANDLE_ROCM_MIOPEN_FIND=1`): `miopenFindConvolution{Forward,BackwardData}
//!   Algorithm` once per shape, then `miopenConvolutionForward` / `miopenConvolutionBackwardData`.
//! - pooling: `miopenPoolingForward` without the backward workspace.
//!
//! Plans (descriptors and the chosen solution) are cached per shape and dtype.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

pub use rocm_device::sys::miopen::{abi, library_status, Functions, Ptr};
use rocm_device::{Buffer, DType, Device, Error, Result};

use crate::params::{ConvSpec, Direction, Pool2dParams};

/// MIOpen's table, loaded once per process and shared by the devices' handles.
#[derive(Debug)]
pub struct MiOpenLib(Functions);

impl std::ops::Deref for MiOpenLib {
    type Target = Functions;
    fn deref(&self) -> &Functions {
        &self.0
    }
}

impl MiOpenLib {
    /// Loads MIOpen and resolves every function of the table.
    pub fn load() -> Result<Arc<Self>> {
        Ok(Arc::new(MiOpenLib(Functions::load(&library_status())?)))
    }

    fn check(&self, call: &'static str, status: i32) -> Result<()> {
        if status == abi::MIOPEN_STATUS_SUCCESS {
            return Ok(());
        }
        // SAFETY: miopenGetErrorString returns a static string for any status value.
        Err(unsafe {
            rocm_device::library_error("MIOpen", call, status.into(), (self.error_string)(status))
        })
    }
}

/// A descriptor, destroyed with its kind's destroy call.
pub struct Descriptor {
    raw: Ptr,
    destroy: unsafe extern "C" fn(Ptr) -> i32,
    lib: Arc<MiOpenLib>,
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Descriptor({:?})", self.raw)
    }
}

// SAFETY: descriptors are plain host objects; they are only used under the MiOpen mutex or by
// the thread that made them.
unsafe impl Send for Descriptor {}
// SAFETY: as above; MIOpen only reads a descriptor during a call.
unsafe impl Sync for Descriptor {}

impl Drop for Descriptor {
    fn drop(&mut self) {
        // SAFETY: made by the matching create call, destroyed once.
        let status = unsafe { (self.destroy)(self.raw) };
        if let Err(e) = self.lib.check("miopenDestroy*Descriptor", status) {
            tracing::warn!("{e}");
        }
    }
}

fn int(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::InvalidLayout(format!("MIOpen: {what} {v} exceeds i32")))
}

fn ints<const N: usize>(what: &str, v: [usize; N]) -> Result<[i32; N]> {
    let mut out = [0i32; N];
    for (o, x) in out.iter_mut().zip(v) {
        *o = int(what, x)?;
    }
    Ok(out)
}

/// MIOpen's data type for a dtype the MIOpen path takes (f64 stays on the portable path:
/// MIOpen lists double as partially supported).
pub fn data_type(dtype: DType) -> Option<i32> {
    match dtype {
        DType::F32 => Some(abi::MIOPEN_FLOAT),
        DType::F16 => Some(abi::MIOPEN_HALF),
        DType::BF16 => Some(abi::MIOPEN_BFLOAT16),
        _ => None,
    }
}

/// Whether a convolution can run on MIOpen. A transposed convolution whose output padding is
/// not below its stride (PyTorch allows it below the dilation) adds a column position that
/// the backward-data pass cannot express: its dy would need one more. Those run on the
/// portable path.
pub fn takes(spec: &ConvSpec) -> bool {
    spec.output_padding.0 < spec.stride.0 && spec.output_padding.1 < spec.stride.1
}

/// A packed (n, c, h, w) tensor descriptor.
pub fn tensor(lib: &Arc<MiOpenLib>, data_type: i32, dims: [usize; 4]) -> Result<Descriptor> {
    let d = ints("dim", dims)?;
    let s = ints(
        "stride",
        [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1],
    )?;
    let mut raw: Ptr = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    lib.check("miopenCreateTensorDescriptor", unsafe {
        (lib.create_tensor)(&mut raw)
    })?;
    let desc = Descriptor {
        raw,
        destroy: lib.destroy_tensor,
        lib: lib.clone(),
    };
    // SAFETY: a live descriptor; dims and strides point to 4 ints each.
    lib.check("miopenSetTensorDescriptor", unsafe {
        (lib.set_tensor)(raw, data_type, 4, d.as_ptr(), s.as_ptr())
    })?;
    Ok(desc)
}

/// The convolution descriptor of a spec, in `mode` (convolution or transpose; the output
/// padding only matters in transpose mode).
pub fn convolution(lib: &Arc<MiOpenLib>, spec: &ConvSpec, mode: i32) -> Result<Descriptor> {
    let pad = ints("padding", [spec.padding.0, spec.padding.1])?;
    let stride = ints("stride", [spec.stride.0, spec.stride.1])?;
    let dil = ints("dilation", [spec.dilation.0, spec.dilation.1])?;
    let adj = ints(
        "output padding",
        [spec.output_padding.0, spec.output_padding.1],
    )?;
    let mut raw: Ptr = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    lib.check("miopenCreateConvolutionDescriptor", unsafe {
        (lib.create_conv)(&mut raw)
    })?;
    let desc = Descriptor {
        raw,
        destroy: lib.destroy_conv,
        lib: lib.clone(),
    };
    // SAFETY: a live descriptor; each array holds the 2 spatial values.
    lib.check("miopenInitConvolutionNdDescriptor", unsafe {
        (lib.init_conv)(raw, 2, pad.as_ptr(), stride.as_ptr(), dil.as_ptr(), mode)
    })?;
    // SAFETY: a live descriptor.
    lib.check("miopenSetConvolutionGroupCount", unsafe {
        (lib.set_group_count)(raw, int("groups", spec.groups)?)
    })?;
    if mode == abi::MIOPEN_TRANSPOSE {
        // SAFETY: a live descriptor; 2 spatial values.
        lib.check("miopenSetTransposeConvNdOutputPadding", unsafe {
            (lib.set_output_padding)(raw, 2, adj.as_ptr())
        })?;
    }
    Ok(desc)
}

/// MIOpen's output dims for input `x` and filter `w` under `conv`.
pub fn conv_output_dims(
    lib: &MiOpenLib,
    conv: &Descriptor,
    x: &Descriptor,
    w: &Descriptor,
) -> Result<[usize; 4]> {
    let mut d = [0i32; 4];
    let [n, c, h, ww] = &mut d;
    // SAFETY: live descriptors and four valid out-pointers.
    lib.check("miopenGetConvolutionForwardOutputDim", unsafe {
        (lib.conv_output_dim)(conv.raw, x.raw, w.raw, n, c, h, ww)
    })?;
    Ok(d.map(|v| v.max(0) as usize))
}

/// A 2-D pooling descriptor without padding.
pub fn pooling(lib: &Arc<MiOpenLib>, mode: i32, p: &Pool2dParams) -> Result<Descriptor> {
    let [kh, kw, sh, sw] = ints("window", [p.kernel.0, p.kernel.1, p.stride.0, p.stride.1])?;
    let mut raw: Ptr = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    lib.check("miopenCreatePoolingDescriptor", unsafe {
        (lib.create_pool)(&mut raw)
    })?;
    let desc = Descriptor {
        raw,
        destroy: lib.destroy_pool,
        lib: lib.clone(),
    };
    // SAFETY: a live descriptor.
    lib.check("miopenSet2dPoolingDescriptor", unsafe {
        (lib.set_pool)(raw, mode, kh, kw, 0, 0, sh, sw)
    })?;
    Ok(desc)
}

/// MIOpen's pooling output dims for input `x`.
pub fn pool_output_dims(lib: &MiOpenLib, pool: &Descriptor, x: &Descriptor) -> Result<[usize; 4]> {
    let mut d = [0i32; 4];
    let [n, c, h, w] = &mut d;
    // SAFETY: live descriptors and four valid out-pointers.
    lib.check("miopenGetPoolingForwardOutputDim", unsafe {
        (lib.pool_output_dim)(pool.raw, x.raw, n, c, h, w)
    })?;
    Ok(d.map(|v| v.max(0) as usize))
}

/// The descriptors of one convolution and how it runs. For a transposed convolution `x` is
/// the backward pass's dy (our input) and `y` its dx (our output).
#[derive(Debug)]
struct ConvPlan {
    x: Descriptor,
    w: Descriptor,
    conv: Descriptor,
    y: Descriptor,
    choice: Option<Choice>,
}

#[derive(Debug, Clone, Copy)]
enum Choice {
    /// Immediate mode: a compiled solution.
    Solution { id: u64, workspace: usize },
    /// Find mode: the fastest algorithm found.
    Algorithm { algo: i32, workspace: usize },
}

/// Builds the descriptors of a spec and checks MIOpen's dims against ours.
fn plan(lib: &Arc<MiOpenLib>, spec: &ConvSpec, data_type: i32) -> Result<ConvPlan> {
    let (input, output) = (spec.input_dims(), spec.output_dims());
    let w = tensor(lib, data_type, spec.kernel_dims())?;
    let conv = convolution(lib, spec, abi::MIOPEN_CONVOLUTION)?;
    let x = tensor(lib, data_type, input)?;
    let y = tensor(lib, data_type, output)?;
    // The forward convolution MIOpen runs (or whose backward pass it runs) maps the image
    // side to the column side: check the dims it derives.
    let (from, expected) = match spec.direction {
        Direction::Forward => (&x, output),
        Direction::Transpose => (&y, input),
    };
    let got = conv_output_dims(lib, &conv, from, &w)?;
    if got != expected {
        return Err(Error::ShapeMismatch {
            op: spec.op,
            detail: format!("MIOpen derives dims {got:?}, expected {expected:?} for {spec:?}"),
        });
    }
    Ok(ConvPlan {
        x,
        w,
        conv,
        y,
        choice: None,
    })
}

/// Plans by spec and MIOpen data type.
type PlanCache = HashMap<(ConvSpec, i32), Arc<Mutex<ConvPlan>>>;

/// A MIOpen handle on a device's stream, with its plan cache.
pub struct MiOpen {
    lib: Arc<MiOpenLib>,
    device: Device,
    handle: Mutex<Ptr>,
    find_mode: bool,
    plans: Mutex<PlanCache>,
}

impl std::fmt::Debug for MiOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MiOpen({:?}, find mode {})", self.device, self.find_mode)
    }
}

// SAFETY: the handle is only used under its mutex; MIOpen handles may move between threads.
unsafe impl Send for MiOpen {}
// SAFETY: as above.
unsafe impl Sync for MiOpen {}

impl MiOpen {
    pub fn new(device: &Device, find_mode: bool) -> Result<Self> {
        let lib = MiOpenLib::load()?;
        device.bind_to_thread()?;
        let mut handle: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and the device's live stream.
        lib.check("miopenCreateWithStream", unsafe {
            (lib.create_with_stream)(&mut handle, device.raw_stream())
        })?;
        Ok(MiOpen {
            lib,
            device: device.clone(),
            handle: Mutex::new(handle),
            find_mode,
            plans: Mutex::new(HashMap::new()),
        })
    }

    fn plan(&self, spec: &ConvSpec, data_type: i32) -> Result<Arc<Mutex<ConvPlan>>> {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = plans.get(&(*spec, data_type)) {
            return Ok(p.clone());
        }
        let p = Arc::new(Mutex::new(plan(&self.lib, spec, data_type)?));
        plans.insert((*spec, data_type), p.clone());
        Ok(p)
    }

    /// Runs a convolution (forward) or transposed convolution (backward data) on contiguous
    /// input and kernel buffers (element offsets given), writing a fresh contiguous output.
    pub fn convolution(
        &self,
        dtype: DType,
        spec: &ConvSpec,
        input: (&Buffer, usize),
        kernel: (&Buffer, usize),
    ) -> Result<Buffer> {
        let data_type = data_type(dtype).ok_or(Error::UnsupportedDType { op: spec.op, dtype })?;
        let size = dtype.size_in_bytes();
        let out_len: usize = spec.output_dims().iter().product();
        let out = self.device.alloc(out_len * size)?;
        if out_len == 0 {
            return Ok(out);
        }
        let plan = self.plan(spec, data_type)?;
        let mut plan = plan.lock().unwrap_or_else(|e| e.into_inner());
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        self.device.bind_to_thread()?;
        let x = (input.0.device_ptr() + (input.1 * size) as u64) as *const c_void;
        let w = (kernel.0.device_ptr() + (kernel.1 * size) as u64) as *const c_void;
        let y = out.device_ptr() as Ptr;
        let forward = spec.direction == Direction::Forward;
        let choice = match plan.choice {
            Some(c) => c,
            None => {
                let c = if self.find_mode {
                    self.find(*handle, &plan, forward, x, w, y)?
                } else {
                    self.best_solution(*handle, &plan, forward)?
                };
                plan.choice = Some(c);
                c
            }
        };
        let (one, zero) = (1f32, 0f32);
        let (alpha, beta) = (
            std::ptr::from_ref(&one).cast::<c_void>(),
            std::ptr::from_ref(&zero).cast::<c_void>(),
        );
        let p = &*plan;
        let lib = &self.lib;
        match choice {
            Choice::Solution { id, workspace } => {
                let ws = self.device.alloc(workspace)?;
                // Forward takes (w, x, conv, y), backward data (dy, w, conv, dx).
                let (run, a, b) = if forward {
                    (lib.fwd_immediate, (p.w.raw, w), (p.x.raw, x))
                } else {
                    (lib.bwd_immediate, (p.x.raw, x), (p.w.raw, w))
                };
                // SAFETY: descriptors match the buffers (dims checked when the plan was made);
                // input, kernel and output hold their element counts; the workspace has the
                // solution's size and stays alive until the stream ran the call.
                let status = unsafe {
                    run(
                        *handle,
                        a.0,
                        a.1,
                        b.0,
                        b.1,
                        p.conv.raw,
                        p.y.raw,
                        y,
                        ws.device_ptr() as Ptr,
                        workspace,
                        id,
                    )
                };
                lib.check("miopenConvolution*Immediate", status)?;
            }
            Choice::Algorithm { algo, workspace } => {
                let ws = self.device.alloc(workspace)?;
                // Both take (x or dy, w, conv, algo, y or dx) in this order.
                let run = if forward { lib.fwd_run } else { lib.bwd_run };
                // SAFETY: as above; alpha and beta point to f32 values (MIOpen's scaling type
                // for half, bfloat16 and float).
                let status = unsafe {
                    run(
                        *handle,
                        alpha,
                        p.x.raw,
                        x,
                        p.w.raw,
                        w,
                        p.conv.raw,
                        algo,
                        beta,
                        p.y.raw,
                        y,
                        ws.device_ptr() as Ptr,
                        workspace,
                    )
                };
                lib.check("miopenConvolution{Forward,BackwardData}", status)?;
            }
        }
        Ok(out)
    }

    /// Immediate mode: the first (best) solution MIOpen lists, compiled.
    fn best_solution(&self, handle: Ptr, p: &ConvPlan, forward: bool) -> Result<Choice> {
        let lib = &self.lib;
        let (count_fn, list_fn, compile_fn) = if forward {
            (lib.fwd_solution_count, lib.fwd_solution, lib.fwd_compile)
        } else {
            (lib.bwd_solution_count, lib.bwd_solution, lib.bwd_compile)
        };
        // Forward calls take (w, x, conv, y); backward-data calls (dy, w, conv, dx).
        let (a, b) = if forward {
            (p.w.raw, p.x.raw)
        } else {
            (p.x.raw, p.w.raw)
        };
        let mut count = 0usize;
        // SAFETY: live handle and descriptors, a valid out-pointer.
        lib.check("miopenConvolution*GetSolutionCount", unsafe {
            count_fn(handle, a, b, p.conv.raw, p.y.raw, &mut count)
        })?;
        let mut list = vec![abi::ConvSolution::default(); count.max(1)];
        let mut returned = 0usize;
        // SAFETY: `list` holds `list.len()` solutions for MIOpen to fill.
        lib.check("miopenConvolution*GetSolution", unsafe {
            list_fn(
                handle,
                a,
                b,
                p.conv.raw,
                p.y.raw,
                list.len(),
                &mut returned,
                list.as_mut_ptr(),
            )
        })?;
        let best = *list[..returned.min(list.len())]
            .first()
            .ok_or_else(|| Error::Library {
                library: "MIOpen",
                call: "miopenConvolution*GetSolution",
                code: 0,
                message: "no solution for this convolution".into(),
            })?;
        // SAFETY: live handle and descriptors; an id MIOpen just listed.
        lib.check("miopenConvolution*CompileSolution", unsafe {
            compile_fn(handle, a, b, p.conv.raw, p.y.raw, best.solution_id)
        })?;
        Ok(Choice::Solution {
            id: best.solution_id,
            workspace: best.workspace_size,
        })
    }

    /// Find mode: MIOpen times its algorithms on these buffers (writing the output).
    fn find(
        &self,
        handle: Ptr,
        p: &ConvPlan,
        forward: bool,
        x: *const c_void,
        w: *const c_void,
        y: Ptr,
    ) -> Result<Choice> {
        let lib = &self.lib;
        // Forward calls take (w, x, conv, y); backward-data calls (dy, w, conv, dx).
        let (a, b) = if forward {
            (p.w.raw, p.x.raw)
        } else {
            (p.x.raw, p.w.raw)
        };
        let (workspace_fn, find_fn) = if forward {
            (lib.fwd_workspace, lib.fwd_find)
        } else {
            (lib.bwd_workspace, lib.bwd_find)
        };
        let mut size = 0usize;
        // SAFETY: live handle and descriptors, a valid out-pointer.
        let status = unsafe { workspace_fn(handle, a, b, p.conv.raw, p.y.raw, &mut size) };
        lib.check("miopenConvolution*GetWorkSpaceSize", status)?;
        let ws = self.device.alloc(size)?;
        let mut perf = abi::ConvAlgoPerf::default();
        let mut returned = 0i32;
        // SAFETY: buffers match the descriptors; one perf result slot; the workspace has the
        // size MIOpen asked for. Both find calls take (x, w, conv, y) in this order.
        let status = unsafe {
            find_fn(
                handle,
                p.x.raw,
                x,
                p.w.raw,
                w,
                p.conv.raw,
                p.y.raw,
                y,
                1,
                &mut returned,
                &mut perf,
                ws.device_ptr() as Ptr,
                size,
                false,
            )
        };
        lib.check("miopenFindConvolution*Algorithm", status)?;
        if returned < 1 {
            return Err(Error::Library {
                library: "MIOpen",
                call: "miopenFindConvolution*Algorithm",
                code: 0,
                message: "no algorithm found".into(),
            });
        }
        Ok(Choice::Algorithm {
            algo: perf.algo,
            workspace: perf.memory,
        })
    }

    /// Max or average pooling of a contiguous (b, c, h, w) input (element offset given).
    pub fn pool2d(
        &self,
        dtype: DType,
        is_max: bool,
        input: (&Buffer, usize),
        dims: [usize; 4],
        p: &Pool2dParams,
        out_dims: [usize; 4],
    ) -> Result<Buffer> {
        let op = if is_max { "max_pool2d" } else { "avg_pool2d" };
        let data_type = data_type(dtype).ok_or(Error::UnsupportedDType { op, dtype })?;
        let size = dtype.size_in_bytes();
        let out = self
            .device
            .alloc(out_dims.iter().product::<usize>() * size)?;
        if out_dims.contains(&0) {
            return Ok(out);
        }
        let lib = &self.lib;
        let mode = if is_max {
            abi::MIOPEN_POOLING_MAX
        } else {
            abi::MIOPEN_POOLING_AVERAGE
        };
        let pool = pooling(lib, mode, p)?;
        let x = tensor(lib, data_type, dims)?;
        let y = tensor(lib, data_type, out_dims)?;
        let got = pool_output_dims(lib, &pool, &x)?;
        if got != out_dims {
            return Err(Error::ShapeMismatch {
                op,
                detail: format!("MIOpen derives dims {got:?}, expected {out_dims:?}"),
            });
        }
        let (one, zero) = (1f32, 0f32);
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        self.device.bind_to_thread()?;
        let xp = (input.0.device_ptr() + (input.1 * size) as u64) as *const c_void;
        // SAFETY: descriptors match the buffers (dims checked above); no backward workspace
        // is asked for (do_backward false).
        let status = unsafe {
            (lib.pool_forward)(
                *handle,
                pool.raw,
                std::ptr::from_ref(&one).cast(),
                x.raw,
                xp,
                std::ptr::from_ref(&zero).cast(),
                y.raw,
                out.device_ptr() as Ptr,
                false,
                std::ptr::null_mut(),
                0,
            )
        };
        lib.check("miopenPoolingForward", status)?;
        Ok(out)
    }
}

impl Drop for MiOpen {
    fn drop(&mut self) {
        // Plans hold descriptors only; they go before the handle.
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let handle = *self.handle.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: made by miopenCreateWithStream, destroyed once.
        let status = unsafe { (self.lib.destroy)(handle) };
        if let Err(e) = self.lib.check("miopenDestroy", status) {
            tracing::warn!("{e}");
        }
    }
}
