//! The tokenizer of a GGUF file, built from its metadata as llama.cpp builds it, as a
//! `tokenizers::Tokenizer`:
//! - `gpt2` (byte-pair merges over GPT-2's byte alphabet): the text cut into words by the
//!   regular expressions of the file's `tokenizer.ggml.pre` ([`pre`]), then merged by rank;
//! - `gemma4` and SentencePiece-style byte pairs: the same over raw UTF-8, spaces as `▁`,
//!   bytes outside the vocabulary as `<0xXX>`;
//! - `llama` (SentencePiece): [`spm`];
//! - `bert` (WordPiece): [`wpm`].
//!
//! Every other `tokenizer.ggml.model`, and a `tokenizer.ggml.pre` llama.cpp does not know, is
//! a [`GgufTokenizerError`] naming it: never a fallback that tokenizes differently.
//!
//! Control and unknown-type tokens spelled in a text become their ids only when the caller
//! asks ([`GgufTokenizer::encode`]'s `parse_special`, as llama.cpp's); user-defined tokens
//! always do. The plain `tokenizers::Tokenizer` ([`TokenizerFromGguf`]) recognizes both, as
//! Hugging Face's tokenizers do, and adds the file's beginning/end tokens when
//! `add_special_tokens` is set.

pub mod pre;
pub mod spm;
pub mod wpm;

use crate::quantized::gguf_file::{self, Value};
use crate::{Error, Result};
use std::sync::OnceLock;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::Replace;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
    Tokenizer,
};

/// Builds a tokenizer from a GGUF file's metadata.
pub trait TokenizerFromGguf: Sized {
    fn from_gguf(ct: &gguf_file::Content) -> Result<Self>;
}

impl TokenizerFromGguf for Tokenizer {
    fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        Ok(GgufTokenizer::from_gguf(ct)?.tokenizer)
    }
}

/// Why a file's tokenizer cannot be built; each names the metadata key at fault.
#[derive(Debug, thiserror::Error)]
pub enum GgufTokenizerError {
    #[error("GGUF tokenizer: the file has no `{key}`")]
    Missing { key: &'static str },
    #[error("GGUF tokenizer: `{key}` {problem}")]
    Invalid { key: &'static str, problem: String },
    #[error("GGUF tokenizer: `tokenizer.ggml.tokens` is empty")]
    EmptyVocab,
    #[error(
        "GGUF tokenizer: `tokenizer.ggml.model` is `{0}`, which is not supported here \
         (supported: llama, gpt2, bert, gemma4)"
    )]
    UnsupportedModel(String),
    #[error(
        "GGUF tokenizer: `tokenizer.ggml.pre` is `{0}`, a pre-tokenizer llama.cpp does not know"
    )]
    UnknownPre(String),
    #[error(
        "GGUF tokenizer: merge {index} of `tokenizer.ggml.merges` ({merge:?}) needs `{token}`, \
         which `tokenizer.ggml.tokens` does not have"
    )]
    MergeOutsideVocab {
        index: usize,
        merge: String,
        token: String,
    },
    #[error("GGUF tokenizer: building the `{model}` tokenizer: {message}")]
    Build { model: String, message: String },
}

impl From<GgufTokenizerError> for Error {
    fn from(e: GgufTokenizerError) -> Self {
        Error::wrap(e)
    }
}

/// GGUF token types (`tokenizer.ggml.token_type`, llama.cpp's `LLAMA_TOKEN_TYPE_*`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// The word boundary SentencePiece-style vocabularies write for a space.
pub const SPACE: &str = "\u{2581}";

/// A file's tokenizer metadata (`tokenizer.ggml.*`), read once.
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    pub model: String,
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub types: Vec<i32>,
    pub merges: Option<Vec<String>>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_sep: Option<bool>,
    pub add_space_prefix: Option<bool>,
    pub lowercase: Option<bool>,
}

fn invalid(key: &'static str, problem: impl Into<String>) -> GgufTokenizerError {
    GgufTokenizerError::Invalid {
        key,
        problem: problem.into(),
    }
}

fn integer(key: &'static str, v: &Value) -> std::result::Result<i64, GgufTokenizerError> {
    Ok(match *v {
        Value::U8(x) => x.into(),
        Value::I8(x) => x.into(),
        Value::U16(x) => x.into(),
        Value::I16(x) => x.into(),
        Value::U32(x) => x.into(),
        Value::I32(x) => x.into(),
        Value::U64(x) => x as i64,
        Value::I64(x) => x,
        _ => return Err(invalid(key, format!("holds {v:?}, not an integer"))),
    })
}

fn array<'a>(
    ct: &'a gguf_file::Content,
    key: &'static str,
) -> std::result::Result<Option<&'a Vec<Value>>, GgufTokenizerError> {
    match ct.metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(invalid(key, format!("is {v:?}, not an array"))),
    }
}

fn strings(
    ct: &gguf_file::Content,
    key: &'static str,
) -> std::result::Result<Option<Vec<String>>, GgufTokenizerError> {
    array(ct, key)?
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(invalid(key, format!("element {i} is {v:?}, not a string"))),
                })
                .collect()
        })
        .transpose()
}

impl GgufVocab {
    /// The `tokenizer.ggml.*` keys of `ct`.
    pub fn from_gguf(ct: &gguf_file::Content) -> std::result::Result<Self, GgufTokenizerError> {
        let text = |key: &'static str| match ct.metadata.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(invalid(key, format!("is {v:?}, not a string"))),
        };
        let id = |key: &'static str| {
            ct.metadata
                .get(key)
                .map(|v| {
                    let i = integer(key, v)?;
                    u32::try_from(i).map_err(|_| invalid(key, format!("is {i}")))
                })
                .transpose()
        };
        let flag = |key: &'static str| match ct.metadata.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(invalid(key, format!("is {v:?}, not a bool"))),
        };
        let model = text("tokenizer.ggml.model")?.ok_or(GgufTokenizerError::Missing {
            key: "tokenizer.ggml.model",
        })?;
        let tokens = strings(ct, "tokenizer.ggml.tokens")?.ok_or(GgufTokenizerError::Missing {
            key: "tokenizer.ggml.tokens",
        })?;
        let n = tokens.len();
        let scores = match array(ct, "tokenizer.ggml.scores")? {
            None => vec![0.0; n],
            Some(a) => a
                .iter()
                .map(|v| match *v {
                    Value::F32(x) => Ok(x),
                    Value::I32(x) => Ok(x as f32),
                    _ => Err(invalid("tokenizer.ggml.scores", format!("holds {v:?}"))),
                })
                .collect::<std::result::Result<_, _>>()?,
        };
        let types = match array(ct, "tokenizer.ggml.token_type")? {
            None => vec![token_type::NORMAL; n],
            Some(a) => a
                .iter()
                .map(|v| integer("tokenizer.ggml.token_type", v).map(|t| t as i32))
                .collect::<std::result::Result<_, _>>()?,
        };
        if scores.len() < n {
            return Err(invalid(
                "tokenizer.ggml.scores",
                format!("has {} entries for {n} tokens", scores.len()),
            ));
        }
        if types.len() < n {
            return Err(invalid(
                "tokenizer.ggml.token_type",
                format!("has {} entries for {n} tokens", types.len()),
            ));
        }
        Ok(GgufVocab {
            model,
            pre: text("tokenizer.ggml.pre")?,
            tokens,
            scores,
            types,
            merges: strings(ct, "tokenizer.ggml.merges")?,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            sep: id("tokenizer.ggml.seperator_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_sep: flag("tokenizer.ggml.add_sep_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
            lowercase: flag("tokenizer.ggml.normalizer.lowercase")?,
        })
    }

    fn token(&self, id: Option<u32>) -> Option<&str> {
        id.and_then(|i| self.tokens.get(i as usize))
            .map(String::as_str)
    }

    /// Tokens matched in the text before the model runs: (text, special). Special ones
    /// (control, unknown) are matched only where the caller asks; user-defined ones always.
    fn added_tokens(&self) -> Vec<AddedToken> {
        self.tokens
            .iter()
            .zip(&self.types)
            .filter_map(|(t, &ty)| {
                let special = match ty {
                    token_type::CONTROL | token_type::UNKNOWN => true,
                    token_type::USER_DEFINED => false,
                    _ => return None,
                };
                Some(AddedToken::from(t.clone(), special).normalized(false))
            })
            .collect()
    }
}

/// Which model the file's tokens run through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerModel {
    /// SentencePiece's merges by score (`llama`).
    SentencePiece,
    /// Byte pairs merged by rank (`gpt2`, `gemma4`), with the pre-tokenizer's family.
    BytePair(pre::PreTokenizer),
    /// WordPiece (`bert`).
    WordPiece,
}

/// A GGUF file's tokenizer with llama.cpp's encode options.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    tokenizer: Tokenizer,
    /// The same with control tokens left as text (built on first use).
    plain: OnceLock<Tokenizer>,
    pub model: TokenizerModel,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// The ids `add_special` puts before and after a text.
    front: Vec<u32>,
    back: Vec<u32>,
}

/// Texts of byte-pair models longer than this are encoded in parts on several threads.
const PART_BYTES: usize = 1 << 16;

/// `text` cut into parts of at least `part_bytes` (the last may be shorter), each cut right
/// after a newline whose neighbours are not whitespace.
fn cut_at_lone_newlines(text: &str, part_bytes: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut at = part_bytes;
    while at < text.len() {
        let Some(nl) = bytes[at..].iter().position(|&b| b == b'\n').map(|p| p + at) else {
            break;
        };
        let before = text[start..nl].chars().next_back();
        let after = text[nl + 1..].chars().next();
        let lone = |c: Option<char>| c.is_some_and(|c| !c.is_whitespace());
        if lone(before) && lone(after) {
            parts.push(&text[start..=nl]);
            start = nl + 1;
            at = start + part_bytes;
        } else {
            at = nl + 1;
        }
    }
    parts.push(&text[start..]);
    parts
}

fn build_error(model: &str) -> impl Fn(tokenizers::Error) -> GgufTokenizerError + '_ {
    move |e| GgufTokenizerError::Build {
        model: model.to_string(),
        message: e.to_string(),
    }
}

impl GgufTokenizer {
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        Ok(Self::from_vocab(&GgufVocab::from_gguf(ct)?)?)
    }

    pub fn from_vocab(v: &GgufVocab) -> std::result::Result<Self, GgufTokenizerError> {
        if v.tokens.is_empty() {
            return Err(GgufTokenizerError::EmptyVocab);
        }
        let err = build_error(&v.model);
        // llama.cpp's defaults per model for the special ids and flags the file leaves out
        let (model, default_bos, default_eos, default_add_bos, mut tokenizer) =
            match v.model.as_str() {
                "llama" => (
                    TokenizerModel::SentencePiece,
                    Some(1),
                    Some(2),
                    true,
                    spm::tokenizer(v, v.add_space_prefix.unwrap_or(true))?,
                ),
                "gpt2" | "gemma4" | "whitespace" => {
                    let name = match v.model.as_str() {
                        "gemma4" => Some("gemma4"),
                        "whitespace" => Some("whitespace"),
                        _ => v.pre.as_deref(),
                    };
                    let pre = pre::by_name(name).ok_or_else(|| {
                        GgufTokenizerError::UnknownPre(name.unwrap_or_default().to_string())
                    })?;
                    let (bos, eos) = match v.model.as_str() {
                        "gpt2" => (Some(11), Some(11)),
                        _ => (None, None),
                    };
                    (
                        TokenizerModel::BytePair(pre),
                        bos,
                        eos,
                        pre.add_bos,
                        byte_pairs(v, &pre)?,
                    )
                }
                "bert" => (
                    TokenizerModel::WordPiece,
                    Some(101),
                    None,
                    true,
                    wpm::tokenizer(v)?,
                ),
                other => return Err(GgufTokenizerError::UnsupportedModel(other.to_string())),
            };
        tokenizer
            .add_special_tokens(v.added_tokens())
            .map_err(&err)?;
        let bos = v.bos.or(default_bos);
        let eos = v.eos.or(default_eos);
        // Gemma 4 files always begin with the BOS token in llama.cpp
        let gemma4 = matches!(model, TokenizerModel::BytePair(p) if p.family == "gemma4");
        let add_bos = gemma4 || v.add_bos.unwrap_or(default_add_bos);
        let add_eos = v.add_eos.unwrap_or(false);
        let mut front = Vec::new();
        let mut back = Vec::new();
        if add_bos {
            front.extend(bos.and_then(|b| Some((v.token(Some(b))?.to_string(), b))));
        }
        if model == TokenizerModel::WordPiece && v.add_sep.unwrap_or(true) {
            let sep = v.sep.or(Some(102));
            back.extend(sep.and_then(|s| Some((v.token(Some(s))?.to_string(), s))));
        }
        if add_eos {
            back.extend(eos.and_then(|e| Some((v.token(Some(e))?.to_string(), e))));
        }
        if !front.is_empty() || !back.is_empty() {
            let seq = |part: &str| -> Vec<String> {
                front
                    .iter()
                    .map(|(t, _)| t.clone())
                    .chain([part.to_string()])
                    .chain(back.iter().map(|(t, _)| t.clone()))
                    .collect()
            };
            let template = TemplateProcessing::builder()
                .try_single(seq("$A"))
                .map_err(|m| build_error(&v.model)(tokenizers::Error::from(m)))?
                .try_pair([seq("$A"), seq("$B:1")].concat())
                .map_err(|m| build_error(&v.model)(tokenizers::Error::from(m)))?
                .special_tokens(front.iter().chain(&back).cloned().collect::<Vec<_>>())
                .build()
                .map_err(|e| build_error(&v.model)(e.into()))?;
            tokenizer.with_post_processor(Some(template));
        }
        Ok(GgufTokenizer {
            tokenizer,
            plain: OnceLock::new(),
            model,
            bos,
            eos,
            add_bos,
            add_eos,
            front: front.iter().map(|(_, id)| *id).collect(),
            back: back.iter().map(|(_, id)| *id).collect(),
        })
    }

    /// The model and, for byte pairs, the pre-tokenizer's family: `spm`, `wpm`, `bpe/llama3`...
    pub fn model_name(&self) -> String {
        match self.model {
            TokenizerModel::SentencePiece => "spm".into(),
            TokenizerModel::WordPiece => "wpm".into(),
            TokenizerModel::BytePair(pre) => format!("bpe/{}", pre.family),
        }
    }

    /// The `tokenizers::Tokenizer` (control tokens spelled in a text become their ids).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The id of a token's text.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    /// The text of a token.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// The ids of `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special)`
    /// gives them: the file's beginning/end tokens where `add_special`; control tokens
    /// spelled in the text recognized where `parse_special`, left as text otherwise. Long
    /// texts of byte-pair models are encoded in parts on the machine's cores
    /// ([`Self::encode_in_parts`]).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        self.encode_in_parts(text, add_special, parse_special, PART_BYTES)
    }

    /// [`Self::encode`] with the text cut into parts of at least `part_bytes` where a cut
    /// changes nothing: after a newline between two characters that are not whitespace (no
    /// pre-tokenizer's word and no merge crosses a lone newline there), for byte-pair models
    /// (SentencePiece puts a `▁` in front of each run of text, so its texts stay whole). The
    /// parts are encoded on the machine's cores and their ids joined.
    pub fn encode_in_parts(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        part_bytes: usize,
    ) -> Result<Vec<u32>> {
        let tokenizer = if parse_special {
            &self.tokenizer
        } else {
            self.plain.get_or_init(|| {
                let mut t = self.tokenizer.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        let encode = |part: &str, add_special: bool| -> Result<Vec<u32>> {
            let encoding = tokenizer
                .encode_fast(part, add_special)
                .map_err(|e| Error::Msg(format!("tokenizer: {e}")))?;
            Ok(encoding.get_ids().to_vec())
        };
        let parts = match self.model {
            TokenizerModel::BytePair(_) => cut_at_lone_newlines(text, part_bytes.max(1)),
            _ => vec![text],
        };
        if parts.len() == 1 {
            return encode(text, add_special);
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(parts.len());
        let per_thread = parts.len().div_ceil(threads);
        let pieces: Vec<Result<Vec<u32>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = parts
                .chunks(per_thread)
                .map(|group| {
                    scope.spawn(move || -> Result<Vec<u32>> {
                        let mut ids = Vec::new();
                        for part in group {
                            ids.extend(encode(part, false)?);
                        }
                        Ok(ids)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(Error::Msg("tokenizer: a worker panicked".into())))
                })
                .collect()
        });
        let mut ids = Vec::with_capacity(text.len() / 3);
        if add_special {
            ids.extend(&self.front);
        }
        for piece in pieces {
            ids.extend(piece?);
        }
        if add_special {
            ids.extend(&self.back);
        }
        Ok(ids)
    }

    /// The text of `ids`; control tokens left out where `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.tokenizer
            .decode(ids, skip_special)
            .map_err(|e| Error::Msg(format!("tokenizer: {e}")))
    }
}

/// The byte-pair tokenizer of a `gpt2`/`gemma4` file with pre-tokenizer `pre`.
fn byte_pairs(
    v: &GgufVocab,
    pre: &pre::PreTokenizer,
) -> std::result::Result<Tokenizer, GgufTokenizerError> {
    let err = build_error(&v.model);
    let merges = v.merges.as_ref().ok_or(GgufTokenizerError::Missing {
        key: "tokenizer.ggml.merges",
    })?;
    let mut vocab = Vocab::default();
    for (id, t) in v.tokens.iter().enumerate() {
        // the first of equal tokens keeps the text
        vocab.entry(t.clone()).or_insert(id as u32);
    }
    let mut pairs = Vec::with_capacity(merges.len());
    for (index, merge) in merges.iter().enumerate() {
        // llama.cpp cuts at the first space after the first byte
        let cut = merge
            .bytes()
            .skip(1)
            .position(|b| b == b' ')
            .map(|at| at + 1);
        let Some(cut) = cut else {
            return Err(invalid(
                "tokenizer.ggml.merges",
                format!("entry {index} ({merge:?}) is not two tokens"),
            ));
        };
        let (left, right) = (&merge[..cut], &merge[cut + 1..]);
        for token in [
            left.to_string(),
            right.to_string(),
            format!("{left}{right}"),
        ] {
            if !vocab.contains_key(&token) {
                return Err(GgufTokenizerError::MergeOutsideVocab {
                    index,
                    merge: merge.clone(),
                    token,
                });
            }
        }
        pairs.push((left.to_string(), right.to_string()));
    }
    let mut model = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(pre.ignore_merges);
    if !pre.byte_level {
        model = model.byte_fallback(true);
    }
    let mut tokenizer = Tokenizer::new(model.build().map_err(&err)?);
    let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
    for regex in pre.regexes {
        let split = Split::new(
            SplitPattern::Regex(pre::for_regex_engine(regex)),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(&err)?;
        steps.push(split.into());
    }
    if pre.byte_level {
        steps.push(ByteLevel::new(false, false, false).into());
        tokenizer.with_decoder(Some(ByteLevelDecoder::new(false, false, false)));
    } else if pre.spaces_as_boundary() {
        let to_boundary = Replace::new(" ", SPACE).map_err(&err)?;
        tokenizer
            .with_normalizer(Some(NormalizerWrapper::Replace(to_boundary)))
            .map_err(&err)?;
        let to_space = Replace::new(SPACE, " ").map_err(&err)?;
        tokenizer.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(vec![
            DecoderWrapper::Replace(to_space),
            DecoderWrapper::ByteFallback(ByteFallback::new()),
            DecoderWrapper::Fuse(Fuse::new()),
        ]))));
    }
    tokenizer.with_pre_tokenizer(Some(PreSequence::new(steps)));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests;
