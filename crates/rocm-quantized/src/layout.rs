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
    let n = whole_blocks("to_device_layout", ty, ggml.len())?;
    let ((start, len), size) = (ty.quant_range(), ty.type_size());
    if len == size {
        return Ok(ggml.to_vec()); // the float types
    }
    let mut out = vec![0u8; ggml.len()];
    let (quants, others) = out.split_at_mut(n * len);
    let blocks = ggml.chunks_exact(size);
    let (quants, others) = (
        quants.chunks_exact_mut(len),
        others.chunks_exact_mut(size - len),
    );
    for ((block, q), m) in blocks.zip(quants).zip(others) {
        q.copy_from_slice(&block[start..start + len]);
        m[..start].copy_from_slice(&block[..start]);
        m[start..].copy_from_slice(&block[start + len..]);
    }
    Ok(out)
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

/// ggml's bytes of `ty` blocks in a new device buffer, in the device layout.
pub fn upload(device: &Device, ty: GgmlType, ggml: &[u8]) -> Result<Buffer> {
    let bytes = to_device_layout(ty, ggml)?;
    let buffer = device.alloc(bytes.len())?;
    device.copy_htod(&bytes, &buffer, 0)?;
    Ok(buffer)
}

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
