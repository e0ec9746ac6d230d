//! The SentencePiece tokenizer of GGUF files whose `tokenizer.ggml.model` is `llama` (Llama 2,
//! Mistral, Phi-3, Gemma and others), built from the file's pieces, scores and token types.
//! Candle's GGUF tokenizer builds GPT-2's byte-level BPE only.
//!
//! SentencePiece's BPE starts from the text's characters (spaces written as `▁`, one put in
//! front) and merges, again and again, the neighbouring pair whose joined piece is in the
//! vocabulary with the highest score; characters outside the vocabulary become their UTF-8
//! bytes' `<0xXX>` pieces. That is a BPE whose merges are every split of every piece into two
//! pieces of the vocabulary, ranked by the joined piece's score: built here as a `tokenizers`
//! BPE with byte fallback, the `▁` normalizer in front and its inverse as the decoder.

use candle_core::quantized::gguf_file;
use candle_core::Result;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper, Tokenizer};

/// The word boundary SentencePiece writes for a space.
const SPACE: &str = "\u{2581}";

/// GGUF token types (`tokenizer.ggml.token_type`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// A SentencePiece vocabulary: pieces, their scores and types, in id order.
#[derive(Debug, Clone)]
pub struct Pieces {
    pub pieces: Vec<String>,
    pub scores: Vec<f32>,
    pub types: Vec<i32>,
}

impl Pieces {
    /// `tokenizer.ggml.{tokens, scores, token_type}` of a `llama`-model GGUF file (scores and
    /// types default to 0 and normal where the file leaves them out).
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let get = |key: &str| content.metadata.get(key);
        let pieces = get("tokenizer.ggml.tokens")
            .ok_or_else(|| candle_core::Error::Msg("GGUF: no tokenizer.ggml.tokens".into()))?
            .to_vec()?
            .iter()
            .map(|v| v.to_string().cloned())
            .collect::<Result<Vec<_>>>()?;
        let n = pieces.len();
        let scores = match get("tokenizer.ggml.scores") {
            Some(v) => v
                .to_vec()?
                .iter()
                .map(|v| v.to_f32())
                .collect::<Result<Vec<_>>>()?,
            None => vec![0.0; n],
        };
        // written as i32 by llama.cpp's tools, as other integers by some writers
        let token_type = |v: &gguf_file::Value| -> Result<i32> {
            use gguf_file::Value as V;
            match *v {
                V::I32(t) => Ok(t),
                V::U32(t) => Ok(t as i32),
                V::I8(t) => Ok(t.into()),
                V::U8(t) => Ok(t.into()),
                V::I16(t) => Ok(t.into()),
                V::U16(t) => Ok(t.into()),
                V::I64(t) => Ok(t as i32),
                V::U64(t) => Ok(t as i32),
                _ => candle_core::bail!("GGUF: a token type of {v:?}"),
            }
        };
        let types = match get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()?
                .iter()
                .map(token_type)
                .collect::<Result<Vec<_>>>()?,
            None => vec![NORMAL; n],
        };
        if scores.len() != n || types.len() != n {
            candle_core::bail!(
                "GGUF: {n} tokens but {} scores and {} token types",
                scores.len(),
                types.len()
            );
        }
        Ok(Pieces {
            pieces,
            scores,
            types,
        })
    }

    /// The tokenizer these pieces make (see the module's text). Control and user-defined
    /// pieces are special tokens: spelled in a text they become their ids.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let err = |e: tokenizers::Error| candle_core::Error::Msg(format!("SentencePiece: {e}"));
        let mut vocab = Vocab::default();
        for (id, piece) in self.pieces.iter().enumerate() {
            // the first of equal pieces keeps the text
            vocab.entry(piece.clone()).or_insert(id as u32);
        }
        // every split of a mergeable piece into two pieces of the vocabulary, ranked by the
        // piece's score (ties: the lower id first)
        let mut ranked: Vec<(f32, u32, String, String)> = Vec::new();
        for (id, piece) in self.pieces.iter().enumerate() {
            if self.types[id] != NORMAL || vocab.get(piece) != Some(&(id as u32)) {
                continue;
            }
            for (at, _) in piece.char_indices().skip(1) {
                let (left, right) = piece.split_at(at);
                if vocab.contains_key(left) && vocab.contains_key(right) {
                    ranked.push((self.scores[id], id as u32, left.into(), right.into()));
                }
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let merges: Merges = ranked.into_iter().map(|(_, _, l, r)| (l, r)).collect();
        let mut model = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true)
            .fuse_unk(true);
        if let Some(unk) = self.types.iter().position(|&t| t == UNKNOWN) {
            model = model.unk_token(self.pieces[unk].clone());
        }
        let mut tokenizer = Tokenizer::new(model.build().map_err(err)?);
        let space_to_boundary = Replace::new(" ", SPACE).map_err(err)?;
        tokenizer
            .with_normalizer(Some(NormalizerWrapper::Sequence(NormalizerSequence::new(
                vec![
                    NormalizerWrapper::Prepend(Prepend::new(SPACE.into())),
                    NormalizerWrapper::Replace(space_to_boundary),
                ],
            ))))
            .map_err(err)?;
        let boundary_to_space = Replace::new(SPACE, " ").map_err(err)?;
        tokenizer.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(vec![
            DecoderWrapper::Replace(boundary_to_space),
            DecoderWrapper::ByteFallback(ByteFallback::new()),
            DecoderWrapper::Fuse(Fuse::new()),
            // the space the normalizer put in front
            DecoderWrapper::Strip(Strip::new(' ', 1, 0)),
        ]))));
        let special: Vec<AddedToken> = self
            .pieces
            .iter()
            .zip(&self.types)
            .filter(|(_, &t)| t == CONTROL || t == USER_DEFINED)
            .map(|(p, _)| AddedToken::from(p.clone(), true))
            .collect();
        tokenizer.add_special_tokens(special).map_err(err)?;
        Ok(tokenizer)
    }
}
