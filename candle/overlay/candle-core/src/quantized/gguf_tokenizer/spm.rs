//! SentencePiece's tokenizer (`tokenizer.ggml.model` = `llama`: Llama 2, Mistral, Phi-3, Gemma
//! and others), from the file's pieces, scores and token types.
//!
//! SentencePiece's BPE starts from the text's characters (spaces written as `▁`, one put in
//! front) and merges, again and again, the neighbouring pair whose joined piece is in the
//! vocabulary with the highest score; characters outside the vocabulary become their UTF-8
//! bytes' `<0xXX>` pieces. That is a BPE whose merges are every split of every piece into two
//! pieces of the vocabulary, ranked by the joined piece's score: built here as a `tokenizers`
//! BPE with byte fallback, the `▁` normalizer in front and its inverse as the decoder.

use super::{build_error, token_type, GgufTokenizerError, GgufVocab, SPACE};
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{DecoderWrapper, NormalizerWrapper, Tokenizer};

/// The tokenizer of `v`'s pieces (see the module's text); `space_prefix`: a `▁` in front of
/// each run of text (`tokenizer.ggml.add_space_prefix`, on by default).
pub fn tokenizer(
    v: &GgufVocab,
    space_prefix: bool,
) -> std::result::Result<Tokenizer, GgufTokenizerError> {
    let err = build_error(&v.model);
    let mut vocab = Vocab::default();
    for (id, piece) in v.tokens.iter().enumerate() {
        // the first of equal pieces keeps the text
        vocab.entry(piece.clone()).or_insert(id as u32);
    }
    // every split of a mergeable piece into two pieces of the vocabulary, ranked by the
    // piece's score (ties: the lower id first)
    let mut ranked: Vec<(f32, u32, String, String)> = Vec::new();
    for (id, piece) in v.tokens.iter().enumerate() {
        if v.types[id] != token_type::NORMAL || vocab.get(piece) != Some(&(id as u32)) {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                ranked.push((v.scores[id], id as u32, left.into(), right.into()));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let merges: Merges = ranked.into_iter().map(|(_, _, l, r)| (l, r)).collect();
    let mut model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    let unk = v.unk.and_then(|u| v.tokens.get(u as usize)).or_else(|| {
        let at = v.types.iter().position(|&t| t == token_type::UNKNOWN)?;
        v.tokens.get(at)
    });
    if let Some(unk) = unk {
        model = model.unk_token(unk.clone());
    }
    let mut tokenizer = Tokenizer::new(model.build().map_err(&err)?);
    let space_to_boundary = NormalizerWrapper::Replace(Replace::new(" ", SPACE).map_err(&err)?);
    let normalizer = if space_prefix {
        NormalizerWrapper::Sequence(NormalizerSequence::new(vec![
            NormalizerWrapper::Prepend(Prepend::new(SPACE.into())),
            space_to_boundary,
        ]))
    } else {
        space_to_boundary
    };
    tokenizer.with_normalizer(Some(normalizer)).map_err(&err)?;
    let mut decoders = vec![
        DecoderWrapper::Replace(Replace::new(SPACE, " ").map_err(&err)?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if space_prefix {
        // the space the normalizer put in front
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    tokenizer.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(
        decoders,
    ))));
    Ok(tokenizer)
}
