//! WordPiece (`tokenizer.ggml.model` = `bert`: BERT, BGE, nomic and other embedding models).
//!
//! GGUF files write a word's first piece with `▁` in front and its continuations bare (the
//! reverse of BERT's own `##` continuations); llama.cpp lower-cases the text (unless
//! `tokenizer.ggml.normalizer.lowercase` is false), strips accents, cuts at whitespace,
//! punctuation, ASCII symbols and CJK ideographs, then takes the longest pieces from each
//! word's start, the unknown token for a word that cannot be covered. That is BERT's
//! normalizer and pre-tokenizer with a WordPiece model over the pieces renamed back.

use super::{build_error, token_type, GgufTokenizerError, GgufVocab, SPACE};
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::Tokenizer;

/// BERT's continuation mark.
const CONTINUATION: &str = "##";

pub fn tokenizer(v: &GgufVocab) -> std::result::Result<Tokenizer, GgufTokenizerError> {
    let err = build_error(&v.model);
    let mut vocab = Vocab::default();
    for (id, (piece, &ty)) in v.tokens.iter().zip(&v.types).enumerate() {
        let name = match piece.strip_prefix(SPACE) {
            Some(first) if !first.is_empty() => first.to_string(),
            _ if ty == token_type::NORMAL => format!("{CONTINUATION}{piece}"),
            _ => piece.clone(),
        };
        vocab.entry(name).or_insert(id as u32);
    }
    let unk = v
        .unk
        .or(Some(100))
        .and_then(|u| v.tokens.get(u as usize))
        .cloned()
        .ok_or_else(|| super::invalid("tokenizer.ggml.unknown_token_id", "names no token"))?;
    let model = WordPiece::builder()
        .vocab(vocab)
        .unk_token(unk)
        .continuing_subword_prefix(CONTINUATION.into())
        .build()
        .map_err(&err)?;
    let lowercase = v.lowercase.unwrap_or(true);
    let mut tokenizer = Tokenizer::new(model);
    tokenizer
        .with_normalizer(Some(BertNormalizer::new(
            true,
            true,
            Some(lowercase),
            lowercase,
        )))
        .map_err(&err)?;
    tokenizer.with_pre_tokenizer(Some(BertPreTokenizer));
    tokenizer.with_decoder(Some(WordPieceDecoder::new(CONTINUATION.into(), true)));
    Ok(tokenizer)
}
