//! Sentence embeddings with all-MiniLM-L6-v2 (BERT) as sentence-transformers computes them:
//! the model's last hidden state, mean-pooled over the real tokens, L2-normalised.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, Tokenizer};

use crate::DemoResult;

/// A tokenized batch: ids, token types and the attention mask, each (batch, tokens) u32.
pub struct Batch {
    pub ids: Tensor,
    pub type_ids: Tensor,
    pub mask: Tensor,
}

pub fn load_tokenizer(model_dir: &Path) -> DemoResult<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(model_dir.join("tokenizer.json"))?;
    tokenizer.with_padding(Some(PaddingParams::default()));
    Ok(tokenizer)
}

pub fn encode(tokenizer: &Tokenizer, sentences: &[&str], device: &Device) -> DemoResult<Batch> {
    let encodings = tokenizer.encode_batch(sentences.to_vec(), true)?;
    let rows = |f: &dyn Fn(&tokenizers::Encoding) -> Vec<u32>| -> DemoResult<Tensor> {
        let rows = encodings
            .iter()
            .map(|e| Tensor::new(f(e).as_slice(), device))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Tensor::stack(&rows, 0)?)
    };
    Ok(Batch {
        ids: rows(&|e| e.get_ids().to_vec())?,
        type_ids: rows(&|e| e.get_type_ids().to_vec())?,
        mask: rows(&|e| e.get_attention_mask().to_vec())?,
    })
}

pub struct Embedder {
    model: BertModel,
}

impl Embedder {
    /// The model in f32 on `device`, from `model.safetensors` (f32 or f16) and `config.json`.
    pub fn load(model_dir: &Path, device: &Device) -> DemoResult<Self> {
        let config: Config =
            serde_json::from_slice(&std::fs::read(model_dir.join("config.json"))?)?;
        let weights = std::fs::read(model_dir.join("model.safetensors"))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, device)?;
        Ok(Self {
            model: BertModel::load(vb, &config)?,
        })
    }

    /// One unit-length embedding per sentence: (batch, hidden) f32.
    pub fn embed(&self, batch: &Batch) -> DemoResult<Tensor> {
        let hidden = self
            .model
            .forward(&batch.ids, &batch.type_ids, Some(&batch.mask))?;
        let mask = batch.mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let mean = summed.broadcast_div(&mask.sum(1)?)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
        Ok(mean.broadcast_div(&norm)?)
    }
}
