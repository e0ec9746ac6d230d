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

/// `out.len()` bytes of `file` from `at`, in parts of at least [`READ_MIN_PART`] bytes read by
/// several threads (positioned reads).
fn read_parallel(file: &std::fs::File, at: u64, out: &mut [u8]) -> std::io::Result<()> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(READ_THREADS);
    let part = out.len().div_ceil(threads).max(READ_MIN_PART);
    let pieces = out
        .chunks_mut(part)
        .enumerate()
        .map(|(i, piece)| (at + (i * part) as u64, piece))
        .collect();
    read_pieces(file, pieces)
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
    /// product computes an expert's parts together (ggml's rows are whole blocks). Each expert's
    /// part is read from the file straight to its place in the buffer (no copy of the join in
    /// fresh memory: a 30B mixture of experts joins 10 GB).
    pub fn experts_joined(&mut self, names: &[String], device: &Device) -> Result<QTensor> {
        // (first byte in the file, bytes an expert) of each part
        let mut parts = Vec::with_capacity(names.len());
        let (mut rows, mut form): (usize, Option<(GgmlDType, usize, usize)>) = (0, None);
        for name in names {
            let info = self.info(name)?;
            let (experts, r, k) = info.shape.dims3()?;
            let ty = info.ggml_dtype;
            let this = (ty, experts, k);
            if form.is_some_and(|f| f != this) || k % ty.block_size() != 0 {
                candle_core::bail!(
                    "GGUF: {names:?} cannot be joined by experts' rows ({name} is {ty:?} of {:?})",
                    info.shape.dims()
                );
            }
            form = Some(this);
            rows += r;
            let at = self.content.tensor_data_offset + info.offset;
            parts.push((at, r * k / ty.block_size() * ty.type_size()));
        }
        let Some((ty, experts, k)) = form else {
            candle_core::bail!("GGUF: no tensors to join");
        };
        let total = experts * parts.iter().map(|&(_, bytes)| bytes).sum::<usize>();
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        }
        // the buffer cut into the pieces in their joined order, each with its place in the file
        let mut pieces = Vec::with_capacity(experts * parts.len());
        let mut rest = &mut self.buf[..total];
        for e in 0..experts {
            for &(at, bytes) in &parts {
                let (piece, tail) = rest.split_at_mut(bytes);
                pieces.push((at + (e * bytes) as u64, piece));
                rest = tail;
            }
        }
        match &mut self.source {
            Source::Stream(r) => pieces.into_iter().try_for_each(|(at, piece)| {
                r.seek(SeekFrom::Start(at))?;
                r.read_exact(piece)
            }),
            Source::File(f) => read_pieces(f, pieces),
        }
        .map_err(|e| candle_core::Error::Msg(format!("GGUF tensors {names:?}: {e}")))?;
        self.used = total;
        qtensor_from_ggml(ty, &self.buf[..total], vec![experts, rows, k], device)
    }
}

/// Each `(at, piece)`: `piece.len()` bytes of `file` from `at`, the pieces shared among up to
/// [`READ_THREADS`] threads (positioned reads).
#[cfg(unix)]
fn read_pieces(file: &std::fs::File, pieces: Vec<(u64, &mut [u8])>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let bytes: usize = pieces.iter().map(|(_, p)| p.len()).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(READ_THREADS)
        .min(bytes.div_ceil(READ_MIN_PART))
        .max(1);
    if threads == 1 {
        return pieces
            .into_iter()
            .try_for_each(|(at, piece)| file.read_exact_at(piece, at));
    }
    let per_thread = pieces.len().div_ceil(threads).max(1);
    let mut pieces = pieces;
    std::thread::scope(|s| {
        let mut reads = Vec::with_capacity(threads);
        while !pieces.is_empty() {
            let share: Vec<_> = pieces.drain(..per_thread.min(pieces.len())).collect();
            reads.push(s.spawn(move || {
                share
                    .into_iter()
                    .try_for_each(|(at, piece)| file.read_exact_at(piece, at))
            }));
        }
        reads.into_iter().try_for_each(|r| {
            r.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a reading thread panicked")))
        })
    })
}

/// Each `(at, piece)`: `piece.len()` bytes of `file` from `at` (one reader).
#[cfg(not(unix))]
fn read_pieces(mut file: &std::fs::File, pieces: Vec<(u64, &mut [u8])>) -> std::io::Result<()> {
    pieces.into_iter().try_for_each(|(at, piece)| {
        file.seek(SeekFrom::Start(at))?;
        file.read_exact(piece)
    })
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

    #[test]
    fn experts_joined_puts_each_experts_parts_together_from_a_file_and_a_stream() {
        use candle_core::quantized::{GgmlDType, QTensor};
        use candle_core::Tensor;
        // 9 MiB of Q8_0 parts: the file's reads go to several threads
        let (experts, k) = (8, 4096);
        let dev = Device::Cpu;
        let part = |rows: usize, seed: f32| {
            let n = experts * rows * k;
            let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect();
            let t = Tensor::from_vec(v, (experts, rows, k), &dev).unwrap();
            QTensor::quantize(&t, GgmlDType::Q8_0).unwrap()
        };
        let (gate, up) = (part(96, 0.5), part(160, 1.5));
        let path = std::env::temp_dir().join(format!("gguf-experts-{}.gguf", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        gguf_file::write(&mut f, &[], &[("gate", &gate), ("up", &up)]).unwrap();
        drop(f);
        // expert e: its gate rows, then its up rows
        let (g, u) = (gate.dequantize(&dev).unwrap(), up.dequantize(&dev).unwrap());
        let want = Tensor::cat(&[&g, &u], 1).unwrap().flatten_all().unwrap();
        let want = want.to_vec1::<f32>().unwrap();
        let names = ["gate".to_string(), "up".to_string()];
        let mut file = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let from_file = TensorReader::from_file(&content, &file)
            .experts_joined(&names, &dev)
            .unwrap();
        let mut stream = std::fs::File::open(&path).unwrap();
        let from_stream = TensorReader::new(&content, &mut stream)
            .experts_joined(&names, &dev)
            .unwrap();
        for joined in [from_file, from_stream] {
            assert_eq!(joined.shape().dims(), &[experts, 256, k]);
            let got = joined.dequantize(&dev).unwrap().flatten_all().unwrap();
            assert!(
                got.to_vec1::<f32>().unwrap() == want,
                "the joined experts differ"
            );
        }
        // parts that differ in width are refused by name
        let narrow = QTensor::quantize(
            &Tensor::zeros((experts, 4, 64), candle_core::DType::F32, &dev).unwrap(),
            GgmlDType::Q8_0,
        )
        .unwrap();
        let mut f = std::fs::File::create(&path).unwrap();
        gguf_file::write(&mut f, &[], &[("gate", &gate), ("narrow", &narrow)]).unwrap();
        drop(f);
        let mut file = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let err = TensorReader::from_file(&content, &file)
            .experts_joined(&["gate".to_string(), "narrow".to_string()], &dev)
            .unwrap_err();
        assert!(err.to_string().contains("narrow"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }
}
