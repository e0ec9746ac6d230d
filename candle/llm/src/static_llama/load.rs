//! Loading: safetensors weights by candle-transformers' llama names (one rank or a
//! tensor-parallel shard), GGUF files by llama.cpp's names, and the options set after.

use super::*;

impl StaticLlama {
    /// Loads the llama's weights from `vb` (the names of candle-transformers' llama) with a
    /// cache of `max_len` positions (at most the config's `max_position_embeddings`).
    pub fn load(vb: VarBuilder<'_>, config: &Config, max_len: usize) -> Result<Self> {
        let device = vb.device().clone();
        Self::load_sharded(vb, config, max_len, &device, None)
    }

    /// This rank's part of the tensor-parallel model on `device` (`vb` may hold the weights
    /// on the host: each rank cuts its part there). Heads, key-value heads and the MLP width
    /// must divide by the number of ranks.
    pub fn load_sharded(
        vb: VarBuilder<'_>,
        config: &Config,
        max_len: usize,
        device: &Device,
        comm: Option<Arc<Comm>>,
    ) -> Result<Self> {
        let device = device.clone();
        if max_len == 0 || max_len > config.max_position_embeddings {
            candle_core::bail!(
                "static llama: max_len {max_len} must be in 1..={}",
                config.max_position_embeddings
            );
        }
        let (rank, ranks) = comm.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads;
        if !heads.is_multiple_of(ranks)
            || !kv_heads.is_multiple_of(ranks)
            || !i.is_multiple_of(ranks)
        {
            candle_core::bail!(
                "static llama: {heads} heads, {kv_heads} kv heads and width {i} do not split over {ranks} ranks"
            );
        }
        let head_dim = h / heads;
        let kv_dim = kv_heads * head_dim;
        let eps = config.rms_norm_eps;
        let part = (rank, ranks);
        let rows = |vb: &VarBuilder<'_>, shape| linear_part(vb, shape, 0, part, &device);
        let cols = |vb: &VarBuilder<'_>, shape| linear_part(vb, shape, 1, part, &device);
        let norm = |n: usize, vb: VarBuilder<'_>| -> Result<RmsNorm> {
            let w = vb
                .get_with_hints(n, "weight", Init::Const(1.))?
                .to_device(&device)?;
            Ok(RmsNorm::new(w, eps))
        };
        // Attention's 1/sqrt(head_dim) folded into q's weights where it is a power of two: the
        // scaling is then exact (the same bits as scaling the scores) and costs no kernel.
        let scale = 1.0 / (head_dim as f64).sqrt();
        let q_prescaled = scale.log2().fract() == 0.0;
        let prescaled = |q: Linear| -> Result<Linear> {
            if q_prescaled {
                Ok(Linear::new((q.weight() * scale)?, None))
            } else {
                Ok(q)
            }
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for n in 0..config.num_hidden_layers {
            let vb = vb.pp(format!("model.layers.{n}"));
            let (att, mlp) = (vb.pp("self_attn"), vb.pp("mlp"));
            layers.push(Layer {
                fused: None,
                input_norm: norm(h, vb.pp("input_layernorm"))?,
                qkv: vec![Proj::Dense(stacked(&[
                    prescaled(rows(&att.pp("q_proj"), (h, h))?)?,
                    rows(&att.pp("k_proj"), (kv_dim, h))?,
                    rows(&att.pp("v_proj"), (kv_dim, h))?,
                ])?)],
                qkv_bias: Vec::new(),
                qk_norm: None,
                o: Proj::Dense(cols(&att.pp("o_proj"), (h, h))?),
                post_norm: norm(h, vb.pp("post_attention_layernorm"))?,
                ffn: FeedForward::Gated {
                    gate_up: vec![Proj::Dense(stacked(&[
                        rows(&mlp.pp("gate_proj"), (i, h))?,
                        rows(&mlp.pp("up_proj"), (i, h))?,
                    ])?)],
                    down: Proj::Dense(cols(&mlp.pp("down_proj"), (h, i))?),
                },
            });
        }
        let embedding_init = Init::Randn {
            mean: 0.,
            stdev: 1.,
        };
        let embed = Embedding::new(
            vb.pp("model.embed_tokens")
                .get_with_hints((config.vocab_size, h), "weight", embedding_init)?
                .to_device(&device)?,
            h,
        );
        let whole = (0, 1);
        let lm_head = Proj::Dense(if config.tie_word_embeddings {
            Linear::new(embed.embeddings().clone(), None)
        } else {
            linear_part(&vb.pp("lm_head"), (config.vocab_size, h), 0, whole, &device)?
        });
        let scaling = match &config.rope_scaling {
            Some(llama3) => RopeScaling::llama3(llama3, head_dim, config.rope_theta),
            None => RopeScaling::None,
        };
        let inv_freq = inverse_frequencies(head_dim, config.rope_theta, &scaling)?;
        let (cos, sin) = rotary_tables(&inv_freq, max_len, &device)?;
        Ok(Self {
            embed: TokenEmbedding::Dense(embed),
            layers,
            norm: norm(h, vb.pp("model.norm"))?,
            lm_head,
            cos,
            sin,
            heads: heads / ranks,
            kv_heads: kv_heads / ranks,
            head_dim,
            max_len,
            device,
            comm,
            q_prescaled,
            fused_attention: true,
            flash_prompts: true,
            rope_interleaved: false,
            eps: config.rms_norm_eps as f32,
            cache_dtype: DType::F32,
            dtype: vb.dtype(),
            native_tables: None,
            architecture: None,
        })
    }

    /// The model of a GGUF file (`content` read from `reader`; llama.cpp's tensor names and
    /// metadata) on `device`, with a cache of `max_len` positions: any [`Architecture`]
    /// (`general.architecture`; another is an [`crate::UnsupportedArchitecture`] error). The
    /// projections and the head stay quantized; the token embedding stays in its blocks, each
    /// looked-up row dequantized; norms and biases are dequantized to f32, and activations run
    /// in f32, as in candle-transformers' `quantized_*` models.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
        max_len: usize,
    ) -> Result<Self> {
        Self::from_gguf_with_progress(content, reader, device, max_len, &mut |_, _| {})
    }

    /// [`StaticLlama::from_gguf`], calling `progress(layers loaded, layers)` as each layer
    /// reaches the device.
    pub fn from_gguf_with_progress<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
        max_len: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let hp = GgufHyperParams::read(content, reader)?;
        Self::from_tensors(
            hp,
            TensorReader::new(content, reader),
            device,
            max_len,
            progress,
        )
    }

    /// [`StaticLlama::from_gguf`] out of the file `content` was read from, each tensor read by
    /// several threads at once: the fastest load.
    pub fn from_gguf_file(
        content: &gguf_file::Content,
        file: &std::fs::File,
        device: &Device,
        max_len: usize,
    ) -> Result<Self> {
        Self::from_gguf_file_with_progress(content, file, device, max_len, &mut |_, _| {})
    }

    /// [`StaticLlama::from_gguf_file`], calling `progress(layers loaded, layers)` as each layer
    /// reaches the device.
    pub fn from_gguf_file_with_progress(
        content: &gguf_file::Content,
        file: &std::fs::File,
        device: &Device,
        max_len: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let hp = GgufHyperParams::read(content, &mut &*file)?;
        let tensors = TensorReader::from_file(content, file);
        Self::from_tensors(hp, tensors, device, max_len, progress)
    }

    pub(super) fn from_tensors<R: std::io::Read + std::io::Seek>(
        hp: GgufHyperParams,
        mut gguf: TensorReader<'_, R>,
        device: &Device,
        max_len: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let arch = hp.architecture;
        if let Some(context) = hp.context {
            if max_len > context {
                candle_core::bail!("static llama: max_len {max_len} over the context of {context}");
            }
        }
        if max_len == 0 {
            candle_core::bail!("static llama: a cache of 0 positions");
        }
        let (heads, kv_heads, head_dim, hidden, eps) =
            (hp.heads, hp.kv_heads, hp.head_dim, hp.hidden, hp.rms_eps);
        let norm = |w: QTensor| -> Result<(RmsNorm, Tensor)> {
            let w = w.dequantize(device)?;
            Ok((RmsNorm::new(w.clone(), eps), w))
        };
        let f32_tensor = |gguf: &mut TensorReader<'_, R>, name: &str| -> Result<Tensor> {
            gguf.tensor(name, device)?
                .dequantize(device)?
                .to_dtype(DType::F32)
        };
        let embed_q = Arc::new(gguf.tensor("token_embd.weight", device)?);
        if embed_q.shape().dims2()?.1 != hidden {
            candle_core::bail!(
                "static llama: token_embd.weight is {:?}, not (vocab, {hidden})",
                embed_q.shape()
            );
        }
        // tied to the embedding where the file has no output matrix
        let lm_head = if gguf.has("output.weight") {
            Arc::new(gguf.tensor("output.weight", device)?)
        } else {
            embed_q.clone()
        };
        let mut blocks = Vec::with_capacity(hp.layers);
        for n in 0..hp.layers {
            let name = |part: &str| format!("blk.{n}.{part}.weight");
            let proj = |gguf: &mut TensorReader<'_, R>, part: &str| -> Result<Proj> {
                let w = gguf.tensor(&name(part), device)?;
                Ok(Proj::Quantized(QMatMul::from_qtensor(w)?))
            };
            let o = proj(&mut gguf, "attn_output")?;
            let qkv = if arch.packed_projections() {
                vec![proj(&mut gguf, "attn_qkv")?]
            } else {
                stacked_gguf(
                    &mut gguf,
                    &[name("attn_q"), name("attn_k"), name("attn_v")],
                    device,
                )?
            };
            let ffn = match hp.experts {
                Some((_, used)) => {
                    let gate_up =
                        gguf.experts_joined(&[name("ffn_gate_exps"), name("ffn_up_exps")], device)?;
                    let down = gguf.tensor(&name("ffn_down_exps"), device)?;
                    let router = f32_tensor(&mut gguf, &name("ffn_gate_inp"))?;
                    FeedForward::Experts(experts::Experts {
                        router: Linear::new(router, None),
                        gate_up: Arc::new(gate_up),
                        down: Arc::new(down),
                        top: used,
                        renorm: true,
                    })
                }
                None => {
                    let down = proj(&mut gguf, "ffn_down")?;
                    let gate_up = if arch.packed_projections() {
                        vec![proj(&mut gguf, "ffn_up")?]
                    } else {
                        stacked_gguf(&mut gguf, &[name("ffn_gate"), name("ffn_up")], device)?
                    };
                    FeedForward::Gated { gate_up, down }
                }
            };
            // biases follow the products: one joined by rows where q/k/v are one product
            let qkv_bias = if arch.qkv_bias() {
                let parts = ["attn_q", "attn_k", "attn_v"]
                    .map(|p| f32_tensor(&mut gguf, &format!("blk.{n}.{p}.bias")))
                    .into_iter()
                    .collect::<Result<Vec<_>>>()?;
                match qkv.len() {
                    1 => vec![Tensor::cat(&parts, 0)?],
                    _ => parts,
                }
            } else {
                Vec::new()
            };
            let qk_norm = if arch.qk_norm() {
                let q = f32_tensor(&mut gguf, &name("attn_q_norm"))?;
                let k = f32_tensor(&mut gguf, &name("attn_k_norm"))?;
                Some((RmsNorm::new(q, eps), RmsNorm::new(k, eps)))
            } else {
                None
            };
            let (input_norm, input_w) = norm(gguf.tensor(&name("attn_norm"), device)?)?;
            let (post_norm, post_w) = norm(gguf.tensor(&name("ffn_norm"), device)?)?;
            // the fused decode step computes layers without biases, their q/k/v one product
            let fused = if qkv_bias.is_empty() {
                let weights = |n: &RmsNorm| n.weight().clone();
                FusedLayer::of(
                    &qkv,
                    &ffn,
                    (&input_w, &post_w),
                    qk_norm.as_ref().map(|(q, k)| (weights(q), weights(k))),
                )
            } else {
                None
            };
            blocks.push(Layer {
                fused,
                input_norm,
                qkv,
                qkv_bias,
                qk_norm,
                o,
                post_norm,
                ffn,
            });
            progress(n + 1, hp.layers);
        }
        let inv_freq = inverse_frequencies(head_dim, hp.rope_base, &hp.rope_scaling)?;
        let (cos, sin) = rotary_tables(&inv_freq, max_len, device)?;
        Ok(Self {
            embed: TokenEmbedding::Quantized(embed_q),
            layers: blocks,
            norm: norm(gguf.tensor("output_norm.weight", device)?)?.0,
            eps: eps as f32,
            lm_head: Proj::Quantized(QMatMul::from_arc(lm_head)?),
            cos,
            sin,
            heads,
            kv_heads,
            head_dim,
            max_len,
            device: device.clone(),
            comm: None,
            q_prescaled: false,
            fused_attention: true,
            flash_prompts: true,
            rope_interleaved: arch.rope_interleaved(),
            cache_dtype: DType::F32,
            dtype: DType::F32,
            native_tables: None,
            architecture: Some(arch),
        })
    }

    /// Attention as separate ops (a gemm over every cached position, an additive mask, a
    /// softmax and a second gemm) instead of one kernel: the form the fused kernel replaced,
    /// kept for comparison.
    pub fn with_unfused_attention(mut self) -> Self {
        self.fused_attention = false;
        self
    }

    /// Prompts' attention through flash attention (`true`, the default) or as the products
    /// over the cache (`false`: the form before flash attention, for comparisons).
    pub fn with_flash_prompts(mut self, on: bool) -> Self {
        self.flash_prompts = on;
        self
    }

    /// The KV cache in `dtype`: f32 (the default), or f16/bf16 (as llama.cpp's f16 cache:
    /// half the bytes, keys and values rounded as they are stored; scores and sums in f32).
    /// A 16-bit cache in the dtype of a 16-bit model (as candle-transformers' llama keeps it)
    /// also keeps a decode step's q, k and v in that dtype: roped in f32 arithmetic and
    /// rounded to it, the attention's output in it, no casts around the attention.
    pub fn with_cache_dtype(mut self, dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            candle_core::bail!("static llama: a KV cache of {dtype:?}: f32, f16 or bf16")
        }
        self.cache_dtype = dtype;
        self.native_tables = if dtype == self.dtype && dtype != DType::F32 {
            Some((self.cos.to_dtype(dtype)?, self.sin.to_dtype(dtype)?))
        } else {
            None
        };
        Ok(self)
    }

    /// The KV cache's dtype.
    pub fn cache_dtype(&self) -> DType {
        self.cache_dtype
    }
}
