//! Decoding: a sequence's state, the decoder that replays a captured step, greedy tokens.

use super::*;

impl DecodeState {
    /// `sampler`'s token from a step's logits, written as the next step's input (greedy
    /// samplers keep the step's own token), and counted among the sampler's recent ones.
    pub fn choose(&self, out: &StepOutput, sampler: &mut Sampler) -> Result<u32> {
        let token = if sampler.is_greedy() {
            out.next.to_vec1::<u32>()?[0]
        } else {
            let drawn = sampler.sample(&out.logits)?;
            self.token.slice_set(&drawn.reshape((1, 1))?, 0, 0)?;
            drawn.to_vec1::<u32>()?[0]
        };
        sampler.accept(token);
        Ok(token)
    }

    /// Positions of the cache used so far.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Counts one step about to run; an error once the cache is full.
    pub fn advance(&mut self) -> Result<()> {
        if self.filled >= self.max_len {
            candle_core::bail!("static llama: the cache holds {} positions", self.max_len);
        }
        self.filled += 1;
        Ok(())
    }

    /// Forgets every position from `to` on: the next prefill writes from there (what the
    /// cache held past it is masked by position until overwritten).
    pub fn rewind(&mut self, to: usize) {
        self.filled = self.filled.min(to);
    }
}

/// Greedy decoding of one sequence, the prompt in one pass, then a token a step, each token
/// read back: eagerly, or (`captured`) by replaying a decode step captured once (after one
/// eager step, which loads its kernels and fills the pool with the step's block sizes).
pub struct Decoder<'a> {
    model: &'a StaticLlama,
    state: DecodeState,
    captured: bool,
    graph: Option<(candle_core::rocm_backend::RocmGraph, StepOutput)>,
    first_logits: Vec<f32>,
    warm: bool,
}

impl<'a> Decoder<'a> {
    /// A sequence (nothing runs yet; `first` is a placeholder token the prompt replaces).
    pub fn new(model: &'a StaticLlama, first: u32, captured: bool) -> Result<Self> {
        Ok(Self {
            model,
            state: model.new_state(first)?,
            captured,
            graph: None,
            first_logits: Vec::new(),
            warm: false,
        })
    }

    /// Runs `prompt` (whose first token the decoder started with) in one pass; the first
    /// generated token.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<u32> {
        let out = self.model.prefill(&mut self.state, prompt)?;
        self.first_logits = out.logits.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        Ok(out.next.to_vec1::<u32>()?[0])
    }

    /// The next greedy token.
    pub fn next_token(&mut self) -> Result<u32> {
        Ok(self.run_step()?.next.to_vec1::<u32>()?[0])
    }

    /// Runs `prompt` in one pass and draws the first generated token with `sampler` from the
    /// logits on the device (the row is not read back; the prompt's tokens join the sampler's
    /// recent ones first).
    pub fn prefill_sampled(&mut self, prompt: &[u32], sampler: &mut Sampler) -> Result<u32> {
        let out = self.model.prefill(&mut self.state, prompt)?;
        prompt.iter().for_each(|&t| sampler.accept(t));
        self.choose(&out, sampler)
    }

    /// The next token drawn by `sampler` (a step, eager or replayed, then the draw on the
    /// device, which replaces the step's greedy token as the next step's input).
    pub fn next_token_sampled(&mut self, sampler: &mut Sampler) -> Result<u32> {
        let out = self.run_step()?;
        self.choose(&out, sampler)
    }

    /// `sampler`'s token from a step's logits, written as the next step's input; greedy
    /// samplers keep the step's own token.
    fn choose(&mut self, out: &StepOutput, sampler: &mut Sampler) -> Result<u32> {
        self.state.choose(out, sampler)
    }

    /// Positions of the cache used so far.
    pub fn filled(&self) -> usize {
        self.state.filled
    }

    /// Forgets the positions from `to` on (see [`DecodeState::rewind`]).
    pub fn rewind(&mut self, to: usize) {
        self.state.rewind(to)
    }

    /// The model it decodes.
    pub fn model(&self) -> &'a StaticLlama {
        self.model
    }

    /// One step on the token the state holds: eagerly, or (captured) an eager step first, then
    /// the step captured once and replayed.
    fn run_step(&mut self) -> Result<StepOutput> {
        self.state.advance()?;
        if !self.captured || !self.warm {
            self.warm = true;
            return self.model.step(&self.state);
        }
        if self.graph.is_none() {
            let Device::Rocm(rocm) = &self.model.device else {
                candle_core::bail!("static llama: capture needs Device::Rocm");
            };
            let (model, state) = (self.model, &self.state);
            self.graph = Some(rocm.capture(|| model.step(state))?);
        }
        let (graph, out) = self
            .graph
            .as_ref()
            .ok_or_else(|| candle_core::Error::Msg("static llama: no captured step".into()))?;
        graph.replay()?;
        Ok(out.clone())
    }

    /// Teacher forcing: the logits (f32) after `prompt`, then after each of `tokens` but the
    /// last, each fed as the next step's input in place of the greedy token; one vector per
    /// token of `tokens`. `prompt` starts with the decoder's first token.
    pub fn forced_logits(&mut self, prompt: &[u32], tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let Some((_, fed)) = tokens.split_last() else {
            return Ok(Vec::new());
        };
        self.prefill(prompt)?;
        let mut out = vec![self.first_logits.clone()];
        for &token in fed {
            let input = Tensor::new(&[[token]], &self.model.device)?;
            self.state.token.slice_set(&input, 0, 0)?;
            let step = self.run_step()?;
            out.push(step.logits.to_dtype(DType::F32)?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// `steps` more replays of the captured step without reading the tokens back (to time
    /// the device's work alone); an error before the step was captured.
    pub fn replay(&mut self, steps: usize) -> Result<()> {
        for _ in 0..steps {
            self.state.advance()?;
            let (graph, _) = self.graph.as_ref().ok_or_else(|| {
                candle_core::Error::Msg("static llama: no captured step to replay".into())
            })?;
            graph.replay()?;
        }
        Ok(())
    }

    /// The logits after the prompt.
    pub fn first_logits(&self) -> &[f32] {
        &self.first_logits
    }
}

/// `steps` greedy tokens after `prompt` and the logits after the prompt.
pub fn greedy(
    model: &StaticLlama,
    prompt: &[u32],
    steps: usize,
    captured: bool,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let first = *prompt
        .first()
        .ok_or_else(|| candle_core::Error::Msg("static llama: empty prompt".into()))?;
    let mut decoder = Decoder::new(model, first, captured)?;
    let mut tokens = vec![decoder.prefill(prompt)?];
    while tokens.len() < steps {
        tokens.push(decoder.next_token()?);
    }
    tokens.truncate(steps);
    Ok((tokens, decoder.first_logits))
}
