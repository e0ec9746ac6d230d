//! Dequantize and embedding: the blocks' values as f32, f16 or bf16.

use crate::*;

/// The output dtypes of dequantize and embedding.
pub(crate) fn out_key(op: &'static str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F16 => Ok("f16"),
        DType::BF16 => Ok("bf16"),
        _ => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The kernel `<family>_<out>` of the quantized module.
pub(crate) fn family_entry<P: KernelParams>(
    op: &'static str,
    family: Family<P>,
    out: DType,
) -> Result<Entry<P>> {
    family
        .entry(&[out_key(op, out)?])
        .ok_or(Error::UnsupportedDType { op, dtype: out })
}

/// Starts compiling, on background threads, the kernel variants matrices of `ty` need: their
/// block type's, and the quantizer of f32 activations (`Device::compile_in_background`).
pub fn compile_in_background(device: &Device, ty: GgmlType) {
    let quantized = &kernels::QUANTIZED;
    device.compile_in_background(&[(quantized, ty.key()), (quantized, DType::F32.as_str())]);
}

/// Every value of `w` as a new contiguous (rows, k) buffer of `out` (f32, f16 or bf16).
pub fn dequantize(device: &Device, w: QWeights<'_>, out: DType) -> Result<Buffer> {
    w.check("dequantize")?;
    dequantize_rows(device, w, 0..w.rows, (out, 0))
}

/// The rows `rows` of a checked `w` as a new contiguous (rows.len(), k) buffer of `out`, its
/// block sized for at least `capacity_rows` rows.
pub(crate) fn dequantize_rows(
    device: &Device,
    w: QWeights<'_>,
    rows: std::ops::Range<usize>,
    (out, capacity_rows): (DType, usize),
) -> Result<Buffer> {
    const OP: &str = "dequantize";
    let entry = family_entry(OP, quantized::DEQUANTIZE, out)?;
    let n = rows.len() * w.k;
    let y = device.alloc(rows.len().max(capacity_rows) * w.k * out.size_in_bytes())?;
    if n == 0 {
        return Ok(y);
    }
    let _span = tracing::debug_span!("op", op = OP, ty = %w.ty, %out, n).entered();
    let params = quantized::DequantizeParams {
        w: w.buffer.ptr(),
        total: w.buffer_blocks() as u64,
        // Rows are whole blocks, so a row range starts on a block.
        first: (rows.start * (w.k / w.ty.block_size())) as u64,
        out: y.ptr(),
        n: n as u64,
    };
    // a thread a value, or DEQUANTIZE_VALUES of them where a block holds a multiple of that
    // (the kernel's loop strides over any grid: this only sizes it)
    let threads = if w.ty.block_size() % DEQUANTIZE_VALUES == 0 {
        n / DEQUANTIZE_VALUES
    } else {
        n
    };
    device.launch_entry_elements(entry, w.ty.key(), threads as u64, &params)?;
    Ok(y)
}

/// Values a thread of the dequantize kernels takes where a block holds a multiple of them
/// (quantized.hip's `DEQUANTIZE_VALUES`).
pub(crate) const DEQUANTIZE_VALUES: usize = 8;

/// The rows `ids` (u32, contiguous, any dims) of the (rows, k) table `w` as a new contiguous
/// (ids, k) buffer of `out`. An id past the table gives a zero row, or with `check_ids`
/// `Error::IndexOutOfRange` (one sync).
pub fn embedding(
    device: &Device,
    w: QWeights<'_>,
    ids: Operand<'_>,
    (out, check_ids): (DType, bool),
) -> Result<Buffer> {
    const OP: &str = "embedding";
    w.check(OP)?;
    if ids.dtype != DType::U32 {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: ids.dtype,
        });
    }
    let ids_data = ids.contiguous(OP)?;
    let entry = family_entry(OP, quantized::EMBEDDING, out)?;
    let n_ids = ids.elem_count();
    let y = device.alloc(n_ids * w.k * out.size_in_bytes())?;
    if n_ids * w.k == 0 {
        return Ok(y);
    }
    let bad = if check_ids {
        Some(device.alloc_zeroed(4)?)
    } else {
        None
    };
    let params = quantized::EmbeddingParams {
        t: w.buffer.ptr(),
        total: w.buffer_blocks() as u64,
        ids: ids_data.ptr()?,
        out: y.ptr(),
        n_ids: n_ids as u64,
        rows: w.rows as u64,
        k: w.k as u64,
        bad: bad.as_ref().map(Buffer::ptr),
    };
    let n = (n_ids * w.k) as u64;
    device.launch_entry_elements(entry, w.ty.key(), n, &params)?;
    if let Some(b) = bad {
        check_ids_counter(device, &b, (&ids_data, n_ids), (OP, w.rows))?;
    }
    Ok(y)
}
