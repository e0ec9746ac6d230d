//! The device layout of GGUF blocks.
//!
//! ggml stores a block's fields together: 18 bytes for Q4_0 (an f16 scale, then 16 bytes of
//! packed 4-bit values), 34 for Q8_0, 210 for Q6_K. Rows of such blocks are aligned to 2 bytes
//! only, so a kernel reading them in place issues 2-byte loads, and a warp's loads touch several
//! times the cache lines their bytes fill. On the device a buffer of n blocks holds instead every
//! block's packed values (the run of bytes [`GgmlType::quant_range`] names, a multiple of 16
//! bytes for every block type) one block after the other, then every block's other fields
//! (ggml's bytes before that run, then those after it) in the same order. Each block's values
//! start on a 16-byte boundary and are read with 16-byte loads; the other fields keep the
//! alignment ggml gives them. The float types are their own layout.
//!
//! The conversion is a permutation of each tensor's bytes, made on the host on the way to the
//! device ([`upload`]) and undone on the way back ([`download`]): the device holds one copy of
//! the weights, and ggml's bytes come back bit for bit.

use crate::{Buffer, Device, Error, GgmlType, Result};

impl GgmlType {
    /// The packed values of a ggml block: (first byte, bytes). QSTART and QBYTES of the type's
    /// struct in quantized.hip (a test reads them there).
    pub const fn quant_range(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (0, 4),
            GgmlType::F16 | GgmlType::BF16 => (0, 2),
            // d; qs[16]
            GgmlType::Q4_0 => (2, 16),
            // d, m; qs[16]
            GgmlType::Q4_1 => (4, 16),
            // d, qh[4]; qs[16]
            GgmlType::Q5_0 => (6, 16),
            // d, m, qh[4]; qs[16]
            GgmlType::Q5_1 => (8, 16),
            // d; qs[32]
            GgmlType::Q8_0 => (2, 32),
            // d, s; qs[32]
            GgmlType::Q8_1 => (4, 32),
            // scales[16], qs[64]; d, dmin
            GgmlType::Q2K => (0, 80),
            // hmask[32], qs[64]; scales[12], d
            GgmlType::Q3K => (0, 96),
            // d, dmin, scales[12]; qs[128]
            GgmlType::Q4K => (16, 128),
            // d, dmin, scales[12]; qh[32], qs[128]
            GgmlType::Q5K => (16, 160),
            // ql[128], qh[64]; scales[16], d
            GgmlType::Q6K => (0, 192),
            // d; qs[256]; bsums[16]
            GgmlType::Q8K => (4, 256),
        }
    }
}

/// Blocks in `len` bytes of `ty`, or a typed error naming `op` where they are not whole.
fn whole_blocks(op: &'static str, ty: GgmlType, len: usize) -> Result<usize> {
    if len % ty.type_size() != 0 {
        return Err(Error::SizeMismatch {
            op,
            detail: format!(
                "{len} bytes are not a whole number of {}-byte {ty} blocks",
                ty.type_size()
            ),
        });
    }
    Ok(len / ty.type_size())
}

/// ggml's bytes of `ty` blocks in the device layout.
pub fn to_device_layout(ty: GgmlType, ggml: &[u8]) -> Result<Vec<u8>> {
    whole_blocks("to_device_layout", ty, ggml.len())?;
    let mut out = vec![0u8; ggml.len()];
    device_layout_range(ty, ggml, 0, &mut out);
    Ok(out)
}

/// Bytes `at..at + out.len()` of the device layout of `ggml` (whole `ty` blocks, the range
/// inside them) into `out`: a piece of [`to_device_layout`]'s result made without the rest,
/// so an upload can write the layout straight into its staging buffers.
pub fn device_layout_range(ty: GgmlType, ggml: &[u8], at: usize, out: &mut [u8]) {
    let ((start, len), size) = (ty.quant_range(), ty.type_size());
    if len == size {
        out.copy_from_slice(&ggml[at..at + out.len()]); // the float types
        return;
    }
    // the packed values, `len` bytes a block, then the other fields, `size - len` a block
    let quants = ggml.len() / size * len;
    let other = size - len;
    let (whole_quants, whole_others) = whole_block_copies(ty);
    let (mut p, mut o) = (at, 0);
    while o < out.len() {
        let left = out.len() - o;
        let (unit, region, r) = if p < quants {
            (len, 0, p)
        } else {
            (other, quants, p - quants)
        };
        let (block, within) = (r / unit, r % unit);
        let region_end = if p < quants { quants } else { ggml.len() };
        // whole blocks: fixed-size copies (most of any range)
        let whole = if within == 0 {
            left.min(region_end - p) / unit
        } else {
            0
        };
        if whole > 0 {
            let src = &ggml[block * size..(block + whole) * size];
            let dst = &mut out[o..o + whole * unit];
            if region == 0 {
                whole_quants(src, dst);
            } else {
                whole_others(src, dst);
            }
            (p, o) = (p + whole * unit, o + whole * unit);
            continue;
        }
        // a block's part: its run up to the next field boundary
        let (src, run) = if p < quants {
            (block * size + start + within, len - within)
        } else if within < start {
            (block * size + within, start - within)
        } else {
            (block * size + len + within, other - within)
        };
        let run = run.min(left);
        out[o..o + run].copy_from_slice(&ggml[src..src + run]);
        (p, o) = (p + run, o + run);
    }
}

/// Whole blocks' packed values, block after block (`SIZE`-byte blocks, the values `LEN` bytes
/// from `START`): copies of sizes the compiler knows, a few moves each.
fn quants_of<const SIZE: usize, const START: usize, const LEN: usize>(src: &[u8], out: &mut [u8]) {
    for (o, b) in out.chunks_exact_mut(LEN).zip(src.chunks_exact(SIZE)) {
        o.copy_from_slice(&b[START..START + LEN]);
    }
}

/// Whole blocks' other fields, block after block.
fn others_of<const SIZE: usize, const START: usize, const LEN: usize>(src: &[u8], out: &mut [u8]) {
    for (o, b) in out.chunks_exact_mut(SIZE - LEN).zip(src.chunks_exact(SIZE)) {
        o[..START].copy_from_slice(&b[..START]);
        o[START..].copy_from_slice(&b[START + LEN..]);
    }
}

/// A permutation of whole blocks: ggml's blocks in, the device layout's run out.
type WholeBlocks = fn(&[u8], &mut [u8]);

/// The fixed-size copies of `ty`'s whole blocks (quants, other fields).
fn whole_block_copies(ty: GgmlType) -> (WholeBlocks, WholeBlocks) {
    macro_rules! fixed {
        ($($t:ident),*) => {
            match ty {
                $(GgmlType::$t => {
                    const SIZE: usize = GgmlType::$t.type_size();
                    const START: usize = GgmlType::$t.quant_range().0;
                    const LEN: usize = GgmlType::$t.quant_range().1;
                    (quants_of::<SIZE, START, LEN>, others_of::<SIZE, START, LEN>)
                })*
                // the float types are their own layout (never asked for)
                GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (copy_all, copy_all),
            }
        };
    }
    fixed!(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K)
}

fn copy_all(src: &[u8], out: &mut [u8]) {
    out.copy_from_slice(&src[..out.len()]);
}

/// Blocks of `ty` in the device layout as ggml's bytes.
pub fn to_ggml_layout(ty: GgmlType, device: &[u8]) -> Result<Vec<u8>> {
    let n = whole_blocks("to_ggml_layout", ty, device.len())?;
    let ((start, len), size) = (ty.quant_range(), ty.type_size());
    if len == size {
        return Ok(device.to_vec()); // the float types
    }
    let mut out = vec![0u8; device.len()];
    let (quants, others) = device.split_at(n * len);
    let (quants, others) = (quants.chunks_exact(len), others.chunks_exact(size - len));
    for ((block, q), m) in out.chunks_exact_mut(size).zip(quants).zip(others) {
        block[start..start + len].copy_from_slice(q);
        block[..start].copy_from_slice(&m[..start]);
        block[start + len..].copy_from_slice(&m[start..]);
    }
    Ok(out)
}

/// ggml's bytes of `ty` blocks in a new device buffer, in the device layout: permuted straight
/// into the upload's staging buffers, a piece while the piece before is copied, by up to
/// [`UPLOAD_THREADS`] threads; the call returns before the last copy ends (later work on the
/// device's stream sees the blocks).
pub fn upload(device: &Device, ty: GgmlType, ggml: &[u8]) -> Result<Buffer> {
    whole_blocks("upload", ty, ggml.len())?;
    let buffer = device.alloc(ggml.len())?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(UPLOAD_THREADS);
    device.copy_htod_with(&buffer, 0, ggml.len(), &mut |at, out| {
        let part = out.len().div_ceil(threads).max(UPLOAD_MIN_PART);
        if part >= out.len() {
            device_layout_range(ty, ggml, at, out);
            return Ok(());
        }
        std::thread::scope(|s| {
            for (i, piece) in out.chunks_mut(part).enumerate() {
                s.spawn(move || device_layout_range(ty, ggml, at + i * part, piece));
            }
        });
        Ok(())
    })?;
    Ok(buffer)
}

/// Threads that permute a staging buffer's piece of an upload (memory-bound: a few suffice).
pub const UPLOAD_THREADS: usize = 8;
/// The least bytes a thread of an upload permutes.
const UPLOAD_MIN_PART: usize = 1 << 20;

/// The `ty` blocks of a device buffer (in the device layout) as ggml's bytes.
pub fn download(device: &Device, ty: GgmlType, buffer: &Buffer) -> Result<Vec<u8>> {
    whole_blocks("download", ty, buffer.len())?;
    let mut bytes = vec![0u8; buffer.len()];
    device.copy_dtoh(buffer, 0, &mut bytes)?;
    to_ggml_layout(ty, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that differ from block to block and from field to field.
    fn pattern(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
            .collect()
    }

    #[test]
    fn any_range_of_the_layout_is_that_range_of_the_whole() {
        for ty in GgmlType::ALL {
            let ggml = pattern(23 * ty.type_size());
            let whole = to_device_layout(ty, &ggml).unwrap();
            for (at, n) in [
                (0, whole.len()),
                (0, 1),
                (1, 5),
                (7, 300),
                (whole.len() - 3, 3),
            ] {
                let n = n.min(whole.len() - at);
                let mut piece = vec![0u8; n];
                device_layout_range(ty, &ggml, at, &mut piece);
                assert_eq!(piece, whole[at..at + n], "{ty} bytes {at}..{}", at + n);
            }
            // every split point of a two-piece upload
            for cut in 0..=whole.len() {
                let mut out = vec![0u8; whole.len()];
                let (a, b) = out.split_at_mut(cut);
                device_layout_range(ty, &ggml, 0, a);
                device_layout_range(ty, &ggml, cut, b);
                assert_eq!(out, whole, "{ty} cut at {cut}");
            }
        }
    }

    #[test]
    fn the_layout_is_undone_bit_for_bit_for_every_type() {
        for ty in GgmlType::ALL {
            for blocks in [0, 1, 3, 17] {
                let ggml = pattern(blocks * ty.type_size());
                let device = to_device_layout(ty, &ggml).unwrap();
                assert_eq!(device.len(), ggml.len(), "{ty}");
                assert_eq!(to_ggml_layout(ty, &device).unwrap(), ggml, "{ty} {blocks}");
            }
        }
    }

    #[test]
    fn packed_values_come_first_and_start_on_16_bytes() {
        for ty in GgmlType::ALL {
            let (start, len) = ty.quant_range();
            assert!(start + len <= ty.type_size(), "{ty}");
            if ty.is_block() {
                assert_eq!(len % 16, 0, "{ty}");
            } else {
                assert_eq!((start, len), (0, ty.type_size()), "{ty}");
            }
            let ggml = pattern(5 * ty.type_size());
            let device = to_device_layout(ty, &ggml).unwrap();
            let block = |i: usize| &ggml[i * ty.type_size()..(i + 1) * ty.type_size()];
            // block 3's values, then block 3's other fields after all blocks' values
            assert_eq!(
                &device[3 * len..4 * len],
                &block(3)[start..start + len],
                "{ty}"
            );
            let other = ty.type_size() - len;
            let at = 5 * len + 3 * other;
            assert_eq!(&device[at..at + start], &block(3)[..start], "{ty}");
            assert_eq!(
                &device[at + start..at + other],
                &block(3)[start + len..],
                "{ty}"
            );
        }
    }

    #[test]
    fn partial_blocks_are_a_typed_error() {
        let e = to_device_layout(GgmlType::Q4_0, &[0u8; 19]).unwrap_err();
        assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
        assert!(e.to_string().contains("q4_0"), "{e}");
        assert!(to_ggml_layout(GgmlType::Q6K, &[0u8; 211]).is_err());
    }

    /// The ranges here are those the kernels' block structs declare.
    #[test]
    fn the_kernels_declare_the_same_ranges() {
        let source = rocm_kernels::QUANTIZED.source;
        for ty in GgmlType::ALL {
            let name = match ty {
                GgmlType::F32 => "QF32".to_string(),
                GgmlType::F16 => "QF16".to_string(),
                GgmlType::BF16 => "QBF16".to_string(),
                _ => ty.key().to_uppercase(),
            };
            let at = source
                .find(&format!("struct {name} {{"))
                .unwrap_or_else(|| panic!("struct {name}"));
            let line = source[at..].lines().find(|l| l.contains("QSTART")).unwrap();
            let (start, len) = ty.quant_range();
            let expect = format!(
                "BYTES = {}, QSTART = {start}, QBYTES = {len};",
                ty.type_size()
            );
            assert!(line.contains(&expect), "{name}: {line} against {expect}");
        }
    }
}
