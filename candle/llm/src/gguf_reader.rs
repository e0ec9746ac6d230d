//! A GGUF file's tensors onto a device through one host buffer.
//!
//! Candle's `Content::tensor` reads each tensor into an allocation of its own, whose fresh
//! pages the kernel zeroes as they are first written: for a multi-gigabyte model about as much
//! time as reading the file. [`TensorReader`] keeps one buffer for the whole load; the device
//! copies each tensor out of it into its page-locked staging (on `Device::Rocm`, permuted into
//! the device layout of quantized blocks on the way) and returns before the copy ends, so
//! reading the next tensor overlaps it.

use std::io::{Read, Seek, SeekFrom};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Result};

/// Reads tensors of one GGUF file by name.
pub struct TensorReader<'a, R> {
    content: &'a gguf_file::Content,
    reader: &'a mut R,
    buf: Vec<u8>,
    bytes_read: u64,
}

impl<'a, R: Read + Seek> TensorReader<'a, R> {
    pub fn new(content: &'a gguf_file::Content, reader: &'a mut R) -> Self {
        TensorReader {
            content,
            reader,
            buf: Vec::new(),
            bytes_read: 0,
        }
    }

    /// The file's entry for `name`, or an error naming it.
    pub fn info(&self, name: &str) -> Result<&'a gguf_file::TensorInfo> {
        self.content
            .tensor_infos
            .get(name)
            .ok_or_else(|| candle_core::Error::Msg(format!("GGUF: no tensor {name} in the file")))
    }

    pub fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Tensor bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Appends tensor `name`'s bytes to the buffer.
    fn append(&mut self, name: &str) -> Result<&'a gguf_file::TensorInfo> {
        let info = self.info(name)?;
        let (elems, ty) = (info.shape.elem_count(), info.ggml_dtype);
        if elems % ty.block_size() != 0 {
            candle_core::bail!(
                "GGUF tensor {name}: {elems} values are not whole {ty:?} blocks of {}",
                ty.block_size()
            );
        }
        let bytes = elems / ty.block_size() * ty.type_size();
        let start = self.buf.len();
        self.buf.resize(start + bytes, 0);
        let at = self.content.tensor_data_offset + info.offset;
        self.reader
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.reader.read_exact(&mut self.buf[start..]))
            .map_err(|e| {
                candle_core::Error::Msg(format!(
                    "GGUF tensor {name}: {bytes} bytes at offset {at}: {e}"
                ))
            })?;
        self.bytes_read += bytes as u64;
        Ok(info)
    }

    /// Tensor `name` on `device`.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        self.buf.clear();
        let info = self.append(name)?;
        qtensor_from_ggml(
            info.ggml_dtype,
            &self.buf,
            info.shape.dims().to_vec(),
            device,
        )
    }

    /// The 2-D tensors `names`, of one block type and width, joined by rows into one tensor
    /// on `device` (ggml's rows are whole blocks, so their bytes follow each other).
    pub fn stacked(&mut self, names: &[String], device: &Device) -> Result<QTensor> {
        self.buf.clear();
        let (mut rows, mut form): (usize, Option<(GgmlDType, usize)>) = (0, None);
        for name in names {
            let info = self.append(name)?;
            let (r, k) = info.shape.dims2()?;
            let this = (info.ggml_dtype, k);
            if form.is_some_and(|f| f != this) {
                candle_core::bail!(
                    "GGUF: {names:?} cannot be joined by rows ({name} is {:?} of width {k})",
                    info.ggml_dtype
                );
            }
            form = Some(this);
            rows += r;
        }
        let Some((ty, k)) = form else {
            candle_core::bail!("GGUF: no tensors to join");
        };
        qtensor_from_ggml(ty, &self.buf, vec![rows, k], device)
    }
}
