//! A GGUF file's tensors onto a device through one host buffer.
//!
//! Candle's `Content::tensor` reads each tensor into an allocation of its own, whose fresh
//! pages the kernel zeroes as they are first written: for a multi-gigabyte model about as much
//! time as reading the file. [`TensorReader`] keeps one buffer for the whole load; the device
//! copies each tensor out of it into its page-locked staging (on `Device::Rocm`, permuted into
//! the device layout of quantized blocks on the way) and returns before the copy ends, so
//! reading the next tensor overlaps it. Made from a `File` ([`TensorReader::from_file`]), it
//! reads each tensor with several threads at once (positioned reads: the page cache copies
//! out at several times one thread's rate).

use std::io::{Read, Seek, SeekFrom};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Result};

/// Threads that read a tensor of a file at once.
pub const READ_THREADS: usize = 8;
/// The least bytes a reading thread takes.
const READ_MIN_PART: usize = 4 << 20;

/// Where the bytes come from.
enum Source<'a, R> {
    Stream(&'a mut R),
    File(&'a std::fs::File),
}

/// Reads tensors of one GGUF file by name.
pub struct TensorReader<'a, R> {
    content: &'a gguf_file::Content,
    source: Source<'a, R>,
    /// Grows to the largest tensor (or join) read and is never shrunk or zeroed again: its
    /// first `used` bytes are the current tensor's.
    buf: Vec<u8>,
    used: usize,
}

impl<'a> TensorReader<'a, std::fs::File> {
    /// Reads `content`'s tensors out of `file` (the file `content` was read from), each with
    /// up to [`READ_THREADS`] threads.
    pub fn from_file(content: &'a gguf_file::Content, file: &'a std::fs::File) -> Self {
        TensorReader {
            content,
            source: Source::File(file),
            buf: Vec::new(),
            used: 0,
        }
    }
}

/// `out.len()` bytes of `file` from `at`, by several threads (positioned reads).
#[cfg(unix)]
fn read_parallel(file: &std::fs::File, at: u64, out: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(READ_THREADS);
    let part = out.len().div_ceil(threads).max(READ_MIN_PART);
    if part >= out.len() {
        return file.read_exact_at(out, at);
    }
    std::thread::scope(|s| {
        let reads: Vec<_> = out
            .chunks_mut(part)
            .enumerate()
            .map(|(i, piece)| s.spawn(move || file.read_exact_at(piece, at + (i * part) as u64)))
            .collect();
        reads.into_iter().try_for_each(|r| {
            r.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a reading thread panicked")))
        })
    })
}

/// `out.len()` bytes of `file` from `at` (elsewhere a file's handles share one position: one
/// reader).
#[cfg(not(unix))]
fn read_parallel(mut file: &std::fs::File, at: u64, out: &mut [u8]) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(out)
}

impl<'a, R: Read + Seek> TensorReader<'a, R> {
    pub fn new(content: &'a gguf_file::Content, reader: &'a mut R) -> Self {
        TensorReader {
            content,
            source: Source::Stream(reader),
            buf: Vec::new(),
            used: 0,
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
        let (start, end) = (self.used, self.used + bytes);
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        let at = self.content.tensor_data_offset + info.offset;
        let out = &mut self.buf[start..end];
        match &mut self.source {
            Source::Stream(r) => r.seek(SeekFrom::Start(at)).and_then(|_| r.read_exact(out)),
            Source::File(f) => read_parallel(f, at, out),
        }
        .map_err(|e| {
            candle_core::Error::Msg(format!(
                "GGUF tensor {name}: {bytes} bytes at offset {at}: {e}"
            ))
        })?;
        self.used = end;
        Ok(info)
    }

    /// Tensor `name` on `device`.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        self.used = 0;
        let info = self.append(name)?;
        qtensor_from_ggml(
            info.ggml_dtype,
            &self.buf[..self.used],
            info.shape.dims().to_vec(),
            device,
        )
    }

    /// The 2-D tensors `names`, of one block type and width, joined by rows into one tensor
    /// on `device` (ggml's rows are whole blocks, so their bytes follow each other).
    pub fn stacked(&mut self, names: &[String], device: &Device) -> Result<QTensor> {
        self.used = 0;
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
        qtensor_from_ggml(ty, &self.buf[..self.used], vec![rows, k], device)
    }
}

impl<R: std::io::Read + std::io::Seek> TensorReader<'_, R> {
    /// The experts' tensors `names` (each `[experts, n_i, k]`, of one block type, width and
    /// expert count) joined by rows within each expert into one `[experts, sum n_i, k]` tensor on
    /// `device`: expert e's rows of the first, then its rows of the second, ..., so that one
    /// product computes an expert's parts together (ggml's rows are whole blocks).
    pub fn experts_joined(&mut self, names: &[String], device: &Device) -> Result<QTensor> {
        self.used = 0;
        // (first byte, bytes an expert) of each part in the buffer
        let mut parts = Vec::with_capacity(names.len());
        let (mut rows, mut form): (usize, Option<(GgmlDType, usize, usize)>) = (0, None);
        for name in names {
            let start = self.used;
            let info = self.append(name)?;
            let (experts, r, k) = info.shape.dims3()?;
            let this = (info.ggml_dtype, experts, k);
            if form.is_some_and(|f| f != this) || k % info.ggml_dtype.block_size() != 0 {
                candle_core::bail!(
                    "GGUF: {names:?} cannot be joined by experts' rows ({name} is {:?} of {:?})",
                    info.ggml_dtype,
                    info.shape.dims()
                );
            }
            form = Some(this);
            rows += r;
            parts.push((start, (self.used - start) / experts.max(1)));
        }
        let Some((ty, experts, k)) = form else {
            candle_core::bail!("GGUF: no tensors to join");
        };
        let mut joined = Vec::with_capacity(self.used);
        for e in 0..experts {
            for &(start, bytes) in &parts {
                joined.extend_from_slice(&self.buf[start + e * bytes..start + (e + 1) * bytes]);
            }
        }
        qtensor_from_ggml(ty, &joined, vec![experts, rows, k], device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_reads_give_the_files_bytes_and_refuse_a_short_file() {
        // several parts of READ_MIN_PART and a short last one, from an odd offset
        let len = 3 * READ_MIN_PART + 12_345;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        let path = std::env::temp_dir().join(format!("gguf-reader-{}.bin", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut out = vec![0u8; len - 5];
        read_parallel(&file, 5, &mut out).unwrap();
        assert!(out == bytes[5..], "the bytes read differ from the file's");
        let mut past = vec![0u8; len];
        let err = read_parallel(&file, 5, &mut past).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        std::fs::remove_file(&path).unwrap();
    }
}
