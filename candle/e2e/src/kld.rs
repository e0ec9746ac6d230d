//! How far one run of a model is from another along the same text, in the manner of llama.cpp's
//! `llama-perplexity --kl-divergence`: both runs are fed the same tokens (teacher forcing), and
//! at each position the next-token distribution of the run under test is compared with the
//! reference's: the KL divergence KL(reference || test), and whether both rank the same token
//! first.
//!
//! The text is the CPU model's own greedy continuation of several chat prompts. The yardstick
//! is the CPU against itself with the prompt fed a token at a time instead of at once: the same
//! function of the same weights with its floating-point work in another order, so the distance
//! that rounding alone makes in this model. A backend is as close to the CPU as it can be when
//! it is no further from it than that.

use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};

use crate::gguf_chat::GgufChat;
use crate::static_llama::{Decoder, StaticLlama};
use crate::DemoResult;
pub use candle_rocm_llm::kld::{
    argmax, divergence, within, Divergence, MAX_MEAN_RATIO, MAX_TOP1_SHORTFALL,
};
use sha2::{Digest, Sha256};

/// The prompts whose greedy continuations make the text.
pub const PROMPTS: [&str; 4] = [
    "Name the planets of the solar system.",
    "Write a short poem about the sea.",
    "Explain how a bicycle stays upright.",
    "What should I pack for a weekend of hiking?",
];
const SYSTEM: &str = "You are a helpful assistant.";
/// Tokens of each continuation: 4 x 128 = 512 positions compared.
pub const STEPS: usize = 128;

/// The text and the CPU's logits along it: per prompt, its tokens and the greedy continuation;
/// the logits at each position with the prompt fed at once (the reference); and the CPU's
/// distance from itself with the prompt fed a token at a time (its own rounding).
pub struct CpuReference {
    pub texts: Vec<(Vec<u32>, Vec<u32>)>,
    pub at_once: Vec<Vec<f32>>,
    pub own: Divergence,
    /// Whether it was read from the disk cache rather than computed.
    pub cached: bool,
}

/// The version of the code that computes the reference (build.rs: this crate's and the LLM
/// runtime's sources, Candle's patches and overlay, the lock file).
const CODE: &str = env!("CANDLE_ROCM_KLD_CODE");
const MAGIC: &[u8] = b"candle-rocm kld reference v1\n";

impl CpuReference {
    /// The CPU model of `path` over [`PROMPTS`], [`STEPS`] tokens each.
    pub fn build(path: &Path) -> DemoResult<Self> {
        let mut cpu = GgufChat::load(path, &Device::Cpu)?;
        let (mut texts, mut at_once, mut stepwise) = (Vec::new(), Vec::new(), Vec::new());
        for user in PROMPTS {
            let prompt = cpu.chat_prompt(SYSTEM, user)?;
            let run = cpu.greedy(&prompt, STEPS, false)?;
            at_once.extend(run.logits);
            stepwise.extend(cpu.forced_logits(&prompt, &run.tokens, true)?);
            texts.push((prompt, run.tokens));
        }
        let own = divergence(&at_once, &stepwise)?;
        Ok(CpuReference {
            texts,
            at_once,
            own,
            cached: false,
        })
    }

    /// [`CpuReference::build`] through a disk cache: under the kernel cache's folder
    /// (`CANDLE_ROCM_CACHE_DIR`), keyed by the SHA-256 of the GGUF's bytes and the version of
    /// the code that computes it. A file that does not read back whole (its own SHA-256 at its
    /// end) is computed again; without a kernel cache nothing is kept.
    pub fn cached(path: &Path) -> DemoResult<Self> {
        let dir = rocm_device::config::Config::global()
            .ok()
            .and_then(|c| c.kernel_cache_dir.clone());
        let Some(dir) = dir else {
            return Self::build(path);
        };
        let file = dir
            .join("kld-reference")
            .join(format!("{}-{CODE}.bin", file_digest(path)?));
        if let Some(reference) = std::fs::read(&file).ok().and_then(|b| Self::decode(&b)) {
            return Ok(reference);
        }
        let reference = Self::build(path)?;
        // A cache that cannot be written costs time, not correctness.
        let written = std::fs::create_dir_all(file.parent().unwrap_or(&dir)).and_then(|()| {
            let partial = file.with_extension(format!("{}.partial", std::process::id()));
            std::fs::write(&partial, reference.encode())?;
            std::fs::rename(&partial, &file)
        });
        if let Err(e) = written {
            eprintln!("the KL reference was not cached in {}: {e}", file.display());
        }
        Ok(reference)
    }

    /// The CPU against itself.
    pub fn own(&self) -> DemoResult<Divergence> {
        Ok(self.own)
    }

    /// Longest prompt plus continuation: the cache a static model needs.
    pub fn max_len(&self) -> usize {
        self.texts
            .iter()
            .map(|(p, t)| p.len() + t.len())
            .max()
            .unwrap_or(0)
    }

    /// Little-endian: texts, logits (positions x vocabulary), the own divergence, then the
    /// SHA-256 of all of it.
    fn encode(&self) -> Vec<u8> {
        let vocab = self.at_once.first().map_or(0, Vec::len);
        let mut out = MAGIC.to_vec();
        let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(&mut out, self.texts.len() as u64);
        for (prompt, tokens) in &self.texts {
            for part in [prompt, tokens] {
                put(&mut out, part.len() as u64);
                part.iter()
                    .for_each(|t| out.extend_from_slice(&t.to_le_bytes()));
            }
        }
        put(&mut out, self.at_once.len() as u64);
        put(&mut out, vocab as u64);
        for row in &self.at_once {
            row.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        put(&mut out, self.own.positions as u64);
        for v in [self.own.mean, self.own.p99, self.own.max, self.own.top1] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    /// The inverse of [`CpuReference::encode`]; `None` for anything else (another format, a
    /// truncated or altered file, logits of unequal rows).
    fn decode(bytes: &[u8]) -> Option<Self> {
        let (body, digest) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
        if Sha256::digest(body).as_slice() != digest {
            return None;
        }
        let mut r = Reader(body.strip_prefix(MAGIC)?);
        let mut texts = Vec::new();
        for _ in 0..r.u64()? {
            let prompt = r.u32s()?;
            let tokens = r.u32s()?;
            texts.push((prompt, tokens));
        }
        let (positions, vocab) = (r.len()?, r.len()?);
        let mut at_once = Vec::with_capacity(positions);
        for _ in 0..positions {
            let row = r.take(vocab.checked_mul(4)?)?;
            at_once.push(
                row.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            );
        }
        let own = Divergence {
            positions: r.len()?,
            mean: r.f64()?,
            p99: r.f64()?,
            max: r.f64()?,
            top1: r.f64()?,
        };
        r.0.is_empty().then_some(CpuReference {
            texts,
            at_once,
            own,
            cached: true,
        })
    }
}

/// The SHA-256 of a file's bytes, in hex.
fn file_digest(path: &Path) -> DemoResult<String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// A cursor over an encoded reference.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }
    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_bits(self.u64()?))
    }
    fn u32s(&mut self) -> Option<Vec<u32>> {
        let n = self.len()?;
        let bytes = self.take(n.checked_mul(4)?)?;
        Some(
            bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

/// candle-transformers' `quantized_llama` on `device` along the reference's text.
pub fn quantized_llama(path: &Path, device: &Device, r: &CpuReference) -> DemoResult<Divergence> {
    let mut model = GgufChat::load(path, device)?;
    let mut logits = Vec::new();
    for (prompt, tokens) in &r.texts {
        logits.extend(model.forced_logits(prompt, tokens, false)?);
    }
    Ok(divergence(&r.at_once, &logits)?)
}

/// The static llama of the same file on `device` along the reference's text, eagerly or
/// (`captured`) replaying a captured decode step, its KV cache in `cache` (f32, f16 or bf16).
pub fn static_llama(
    path: &Path,
    device: &Device,
    r: &CpuReference,
    (captured, cache): (bool, DType),
) -> DemoResult<Divergence> {
    let mut file = std::fs::File::open(path)?;
    let content = gguf_file::Content::read(&mut file)?;
    let model = StaticLlama::from_gguf(&content, &mut file, device, r.max_len() + 1)?
        .with_cache_dtype(cache)?;
    let mut logits = Vec::new();
    for (prompt, tokens) in &r.texts {
        let first = *prompt.first().ok_or("an empty prompt")?;
        let mut decoder = Decoder::new(&model, first, captured)?;
        logits.extend(decoder.forced_logits(prompt, tokens)?);
    }
    Ok(divergence(&r.at_once, &logits)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CpuReference {
        CpuReference {
            texts: vec![(vec![1, 2, 3], vec![4, 5]), (vec![6], vec![7, 8, 9])],
            at_once: vec![vec![0.5, -1.25, 3.0], vec![f32::MIN_POSITIVE, 0.0, -7.5]],
            own: Divergence {
                positions: 2,
                mean: 1.5e-3,
                p99: 2.5e-2,
                max: 3.0e-2,
                top1: 0.99,
            },
            cached: false,
        }
    }

    #[test]
    fn a_reference_reads_back_as_it_was_written() {
        let r = sample();
        let back = CpuReference::decode(&r.encode()).expect("reads back");
        assert!(back.cached);
        assert_eq!(back.texts, r.texts);
        assert_eq!(back.at_once, r.at_once);
        assert_eq!(back.own.positions, 2);
        assert_eq!(
            [back.own.mean, back.own.p99, back.own.max, back.own.top1],
            [r.own.mean, r.own.p99, r.own.max, r.own.top1]
        );
    }

    #[test]
    fn an_altered_or_truncated_reference_is_not_read() {
        let bytes = sample().encode();
        let mut altered = bytes.clone();
        altered[MAGIC.len() + 9] ^= 1;
        assert!(CpuReference::decode(&altered).is_none());
        assert!(CpuReference::decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(CpuReference::decode(&bytes[1..]).is_none());
        assert!(CpuReference::decode(&[]).is_none());
    }
}
