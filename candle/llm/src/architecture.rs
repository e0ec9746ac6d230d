//! What a GGUF file's `general.architecture` asks of the static model: the metadata prefix of
//! its hyper-parameters, and how its layers differ from llama's (biases, q/k norms, packed
//! projections, the rotary layout). llama.cpp's names throughout.

use candle_core::quantized::gguf_file;
use candle_core::Result;

use crate::rope::RopeScaling;

/// The architectures the static model computes. Mistral and Llama 3.x files carry `llama`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Rotary embedding on interleaved pairs (llama.cpp's converter permutes q and k so).
    Llama,
    /// q, k and v projections with biases; rotary embedding on halves.
    Qwen2,
    /// An rms norm on each head of q and k before the rotary embedding (on halves); the head
    /// width from `attention.key_length`.
    Qwen3,
    /// q, k and v packed in one projection (`attn_qkv`), gate and up in one (`ffn_up`, gate
    /// first); rotary embedding on halves.
    Phi3,
    /// Qwen3's attention, and a mixture of experts in place of the MLP: a router
    /// (`ffn_gate_inp`) picks `expert_used_count` of `expert_count` gated MLPs a token
    /// (`ffn_{gate,up,down}_exps`), their outputs summed by the renormalised router weights.
    Qwen3Moe,
}

/// A GGUF of an architecture the static model does not compute (its name as the file has it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedArchitecture(pub String);

impl std::fmt::Display for UnsupportedArchitecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = Architecture::ALL.iter().map(|a| a.name()).collect();
        write!(
            f,
            "static llama: general.architecture {:?} is not supported (supported: {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnsupportedArchitecture {}

impl Architecture {
    pub const ALL: [Architecture; 5] = [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Phi3,
        Architecture::Qwen3Moe,
    ];

    /// `general.architecture`'s value, and the prefix of the file's hyper-parameters.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Phi3 => "phi3",
            Architecture::Qwen3Moe => "qwen3moe",
        }
    }

    /// The architecture of `name`, or the error naming it (loaders return it inside Candle's
    /// error, with its message; check a file's name with this before loading to match on it).
    pub fn from_name(name: &str) -> std::result::Result<Self, UnsupportedArchitecture> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| UnsupportedArchitecture(name.to_string()))
    }

    pub(crate) fn rope_interleaved(self) -> bool {
        self == Architecture::Llama
    }

    pub(crate) fn qkv_bias(self) -> bool {
        self == Architecture::Qwen2
    }

    pub(crate) fn qk_norm(self) -> bool {
        matches!(self, Architecture::Qwen3 | Architecture::Qwen3Moe)
    }

    pub(crate) fn experts(self) -> bool {
        self == Architecture::Qwen3Moe
    }

    pub(crate) fn packed_projections(self) -> bool {
        self == Architecture::Phi3
    }
}

/// A GGUF model's shape and rotary embedding, read from its metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHyperParams {
    pub architecture: Architecture,
    pub heads: usize,
    pub kv_heads: usize,
    /// The residual stream's width.
    pub hidden: usize,
    /// Each head's width (`attention.key_length`, else hidden / heads).
    pub head_dim: usize,
    pub layers: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
    pub rope_scaling: RopeScaling,
    /// The context the model was trained for, where the file says.
    pub context: Option<usize>,
    /// A mixture of experts' size: (experts, experts used a token).
    pub experts: Option<(usize, usize)>,
}

impl GgufHyperParams {
    /// Reads them; an error naming what is missing, inconsistent or not computed here (an
    /// unknown architecture, partial or YaRN/LongRoPE rotary embeddings).
    pub fn read<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
    ) -> Result<Self> {
        let md = |key: &str| {
            content.metadata.get(key).ok_or_else(|| {
                candle_core::Error::Msg(format!("static llama: no {key} in the GGUF"))
            })
        };
        let architecture = Architecture::from_name(md("general.architecture")?.to_string()?)
            .map_err(candle_core::Error::wrap)?;
        let arch = architecture.name();
        let key = |k: &str| format!("{arch}.{k}");
        let count = |k: &str| -> Result<usize> { Ok(md(&key(k))?.to_u32()? as usize) };
        let optional_count = |k: &str| -> Result<Option<usize>> {
            content
                .metadata
                .get(&key(k))
                .map(|v| Ok(v.to_u32()? as usize))
                .transpose()
        };
        for long_rope in ["rope_factors_long.weight", "rope_factors_short.weight"] {
            if content.tensor_infos.contains_key(long_rope) {
                candle_core::bail!(
                    "static llama: the GGUF carries LongRoPE factors ({long_rope}); not supported"
                );
            }
        }
        let heads = count("attention.head_count")?;
        let kv_heads = count("attention.head_count_kv")?;
        let hidden = count("embedding_length")?;
        let layers = count("block_count")?;
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
            candle_core::bail!("static llama: {heads} heads over {kv_heads} kv heads");
        }
        let head_dim = match optional_count("attention.key_length")? {
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => candle_core::bail!("static llama: width {hidden} over {heads} heads"),
        };
        if let Some(v) = optional_count("attention.value_length")? {
            if v != head_dim {
                candle_core::bail!("static llama: key width {head_dim} and value width {v}");
            }
        }
        if head_dim == 0 || head_dim % 2 != 0 {
            candle_core::bail!("static llama: a head width of {head_dim}");
        }
        if let Some(rotated) = optional_count("rope.dimension_count")? {
            if rotated != head_dim {
                candle_core::bail!(
                    "static llama: the rotary embedding covers {rotated} of {head_dim} head dims; \
                     only whole heads are supported"
                );
            }
        }
        let rms_eps = f64::from(md(&key("attention.layer_norm_rms_epsilon"))?.to_f32()?);
        let rope_base = match content.metadata.get(&key("rope.freq_base")) {
            Some(v) => v.to_f32()?,
            None => 10_000.,
        };
        let scaling_type = match content.metadata.get(&key("rope.scaling.type")) {
            Some(v) => v.to_string()?.clone(),
            None => "none".to_string(),
        };
        let rope_scaling = match scaling_type.as_str() {
            "none" => RopeScaling::None,
            "linear" => RopeScaling::Linear(md(&key("rope.scaling.factor"))?.to_f32()?),
            other => candle_core::bail!(
                "static llama: rope scaling {other:?} is not supported (none, linear, and \
                 Llama 3.x's rope_freqs)"
            ),
        };
        // Llama 3.x files carry per-frequency factors as a tensor (on top of no scaling type).
        let rope_scaling = match content.tensor_infos.get("rope_freqs.weight") {
            None => rope_scaling,
            Some(_) if rope_scaling != RopeScaling::None => candle_core::bail!(
                "static llama: both rope_freqs and rope scaling {scaling_type:?}"
            ),
            Some(_) => {
                let factors = content
                    .tensor(reader, "rope_freqs.weight", &candle_core::Device::Cpu)?
                    .dequantize(&candle_core::Device::Cpu)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                RopeScaling::Factors(factors)
            }
        };
        let experts = if architecture.experts() {
            if optional_count("expert_shared_feed_forward_length")?.unwrap_or(0) > 0 {
                candle_core::bail!("static llama: shared experts are not supported");
            }
            let (all, used) = (count("expert_count")?, count("expert_used_count")?);
            if used == 0 || used > all {
                candle_core::bail!("static llama: {used} of {all} experts a token");
            }
            Some((all, used))
        } else {
            None
        };
        Ok(Self {
            architecture,
            experts,
            heads,
            kv_heads,
            hidden,
            head_dim,
            layers,
            rms_eps,
            rope_base,
            rope_scaling,
            context: optional_count("context_length")?,
        })
    }
}
