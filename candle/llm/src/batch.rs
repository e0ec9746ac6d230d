//! Several sequences decoding together in fixed slots: every layer's cache holds a row per
//! slot (`[slots, kv_heads, max_len, head_dim]`), and one step runs every slot's token at its
//! own position. On ROCm with GGUF projections the step is the fused decode step over all
//! slots at once (each weight read once for the batch; the rotary embedding, the cache write
//! and the attention take each slot's own position and cache), with the same shapes and
//! kernel arguments at every position, so it can be captured and replayed; elsewhere it is
//! [`StaticLlama::step_many`] over the slots.

use candle_core::{DType, Device, Result, Tensor, D};

use crate::sampling::Sampler;
use crate::static_llama::{DecodeState, StaticLlama, StepOutput};

/// The caches and step inputs of `slots` sequences. A slot is filled by
/// [`StaticLlama::prefill_slot`]; [`StaticLlama::step_batch`] then steps every slot.
pub struct BatchState {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// u32 `[slots, 1]`: each slot's next token.
    tokens: Tensor,
    /// u32 `[slots]`: each slot's position.
    positions: Tensor,
    /// u32 `[slots]` of ones.
    ones: Tensor,
    /// u32 `[max_len]`: 0, 1, ... (the mask's comparison, shared with the slots' views).
    arange: Tensor,
    one: Tensor,
    zeros: Tensor,
    minus_inf: Tensor,
    /// Positions filled so far, a slot each (host-side bound check).
    filled: Vec<usize>,
    max_len: usize,
}

/// What a batch step left on the device: the logits (`[slots, vocab]`, the model's dtype) and
/// each slot's greedy token (u32 `[slots]`).
#[derive(Clone)]
pub struct BatchOutput {
    pub logits: Tensor,
    pub next: Tensor,
}

impl StaticLlama {
    /// `slots` empty sequences (position 0, token 0) decoding together.
    pub fn new_batch(&self, slots: usize) -> Result<BatchState> {
        if slots == 0 {
            candle_core::bail!("static llama: a batch of no sequences");
        }
        let dev = self.device();
        let max_len = self.max_len();
        Ok(BatchState {
            k: self.caches(slots)?,
            v: self.caches(slots)?,
            tokens: Tensor::zeros((slots, 1), DType::U32, dev)?,
            positions: Tensor::zeros(slots, DType::U32, dev)?,
            ones: Tensor::ones(slots, DType::U32, dev)?,
            arange: Tensor::arange(0u32, max_len as u32, dev)?,
            one: Tensor::new(&[1u32], dev)?,
            zeros: Tensor::zeros(max_len, DType::F32, dev)?,
            minus_inf: Tensor::full(f32::NEG_INFINITY, max_len, dev)?,
            filled: vec![0; slots],
            max_len,
        })
    }

    /// `prompt` into slot `slot` after what it holds (from position 0 after
    /// [`BatchState::reset`]), in one pass of its own: fills the slot's cache and leaves the
    /// greedy token after it and the next position as the slot's step inputs.
    pub fn prefill_slot(
        &self,
        batch: &mut BatchState,
        slot: usize,
        prompt: &[u32],
    ) -> Result<StepOutput> {
        let mut state = batch.slot(slot)?;
        let out = self.prefill(&mut state, prompt)?;
        batch.filled[slot] = state.filled;
        Ok(out)
    }

    /// One decode step of every slot: each slot's token at its position, its key and value
    /// written into its cache; each slot's greedy token and next position are written as the
    /// next step's inputs. Does not check positions (see [`BatchState::advance`]); a slot past
    /// its cache's end writes nothing there and attends to the whole cache.
    pub fn step_batch(&self, batch: &BatchState) -> Result<BatchOutput> {
        let slots = batch.slots();
        if !self.decodes_fused() {
            let all: Vec<usize> = (0..slots).collect();
            return self.step_slots(batch, &all);
        }
        let logits = self.forward_fused((&batch.k, &batch.v), &batch.tokens, &batch.positions)?;
        let next = logits.argmax(D::Minus1)?;
        batch.tokens.slice_set(&next.reshape((slots, 1))?, 0, 0)?;
        batch
            .positions
            .slice_set(&(&batch.positions + &batch.ones)?, 0, 0)?;
        Ok(BatchOutput { logits, next })
    }
}

impl StaticLlama {
    /// One decode step of the slots `slots` only, each a sequence of its own over its row of
    /// the caches (the steps write their tokens and positions through the views): the logits
    /// `[slots.len(), vocab]` and greedy tokens in `slots`' order. Where the step is the fused
    /// one, [`StaticLlama::step_batch`] steps every slot instead (its shapes never change).
    pub fn step_slots(&self, batch: &BatchState, slots: &[usize]) -> Result<BatchOutput> {
        if slots.is_empty() {
            candle_core::bail!("static llama: a step of no slots");
        }
        let states = slots
            .iter()
            .map(|&i| batch.slot(i))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&DecodeState> = states.iter().collect();
        let (rows, next): (Vec<Tensor>, Vec<Tensor>) = self
            .step_many(&refs)?
            .into_iter()
            .map(|o| (o.logits, o.next))
            .unzip();
        Ok(BatchOutput {
            logits: Tensor::stack(&rows, 0)?,
            next: Tensor::cat(&next, 0)?,
        })
    }
}

impl BatchState {
    /// Sequences it holds.
    pub fn slots(&self) -> usize {
        self.filled.len()
    }

    /// Positions of slot `slot`'s cache used so far.
    pub fn filled(&self, slot: usize) -> usize {
        self.filled.get(slot).copied().unwrap_or(0)
    }

    /// Counts one step about to run for `slot`; an error once its cache is full.
    pub fn advance(&mut self, slot: usize) -> Result<()> {
        self.check(slot)?;
        if self.filled[slot] >= self.max_len {
            candle_core::bail!(
                "static llama: slot {slot}'s cache holds {} positions",
                self.max_len
            );
        }
        self.filled[slot] += 1;
        Ok(())
    }

    /// Empties slot `slot` for a new sequence (its next prefill writes from position 0; what
    /// its cache held is masked by position until overwritten).
    pub fn reset(&mut self, slot: usize) -> Result<()> {
        self.check(slot)?;
        self.filled[slot] = 0;
        Ok(())
    }

    /// Forgets slot `slot`'s positions from `to` on: its next prefill writes from there (a
    /// cached prefix kept for a new sequence that starts with it).
    pub fn rewind(&mut self, slot: usize, to: usize) -> Result<()> {
        self.check(slot)?;
        self.filled[slot] = self.filled[slot].min(to);
        Ok(())
    }

    /// `token` as slot `slot`'s next step input (a token the caller chose itself).
    pub fn feed(&self, slot: usize, token: u32) -> Result<()> {
        self.check(slot)?;
        let dev = self.tokens.device();
        self.tokens
            .slice_set(&Tensor::new(&[[token]], dev)?, 0, slot)
    }

    /// `sampler`'s token for slot `slot` from its logits (`[vocab]`; `greedy`: the step's
    /// greedy token for the slot, read back by the caller, which greedy samplers keep),
    /// written as the slot's next input and counted among the sampler's recent ones.
    pub fn choose(
        &self,
        slot: usize,
        logits: &Tensor,
        greedy: Option<u32>,
        sampler: &mut Sampler,
    ) -> Result<u32> {
        self.check(slot)?;
        let token = if sampler.is_greedy() {
            greedy.ok_or_else(|| {
                candle_core::Error::Msg(format!("static llama: no greedy token for slot {slot}"))
            })?
        } else {
            let drawn = sampler.sample(logits)?;
            self.tokens.slice_set(&drawn.reshape((1, 1))?, 0, slot)?;
            drawn.to_vec1::<u32>()?[0]
        };
        sampler.accept(token);
        Ok(token)
    }

    /// The first `n` slots as a batch of their own: views of their rows of the caches and
    /// step inputs, so a step of it writes into this batch (a step over the busy slots only
    /// where they are the first ones). The positions counted on the host stay this batch's:
    /// count steps with [`BatchState::advance`] here, not on the view.
    pub fn leading(&self, n: usize) -> Result<BatchState> {
        if n == 0 || n > self.slots() {
            candle_core::bail!(
                "static llama: the first {n} slots of a batch of {} sequences",
                self.slots()
            );
        }
        Ok(BatchState {
            k: rows(&self.k, 0, n)?,
            v: rows(&self.v, 0, n)?,
            tokens: self.tokens.narrow(0, 0, n)?,
            positions: self.positions.narrow(0, 0, n)?,
            ones: self.ones.narrow(0, 0, n)?,
            arange: self.arange.clone(),
            one: self.one.clone(),
            zeros: self.zeros.clone(),
            minus_inf: self.minus_inf.clone(),
            filled: self.filled[..n].to_vec(),
            max_len: self.max_len,
        })
    }

    /// An error naming the slot where there is no such slot.
    fn check(&self, slot: usize) -> Result<()> {
        if slot >= self.slots() {
            candle_core::bail!(
                "static llama: slot {slot} of a batch of {} sequences",
                self.slots()
            );
        }
        Ok(())
    }

    /// Slot `slot` as a sequence of its own: views of its rows of the caches and of the step
    /// inputs (what its steps write lands in the batch).
    fn slot(&self, slot: usize) -> Result<DecodeState> {
        self.check(slot)?;
        Ok(DecodeState {
            k: rows(&self.k, slot, 1)?,
            v: rows(&self.v, slot, 1)?,
            token: self.tokens.narrow(0, slot, 1)?,
            position: self.positions.narrow(0, slot, 1)?,
            positions: self.arange.clone(),
            one: self.one.clone(),
            zeros: self.zeros.clone(),
            minus_inf: self.minus_inf.clone(),
            filled: self.filled[slot],
            max_len: self.max_len,
        })
    }
}

/// Slots `start..start + n` of every layer's cache (views).
fn rows(caches: &[Tensor], start: usize, n: usize) -> Result<Vec<Tensor>> {
    caches.iter().map(|c| c.narrow(0, start, n)).collect()
}

/// A captured batch step: the graph, the outputs it writes, and the batch it was captured on
/// (its token tensor's id).
type CapturedStep = (
    candle_core::TensorId,
    candle_core::rocm_backend::RocmGraph,
    BatchOutput,
);

/// Steps batches eagerly, or (`captured`, where the step is the fused one on ROCm) by replaying
/// a step captured for each batch after one eager step of it (which loads its kernels and fills
/// the pool with the step's block sizes). Batches it steps are told apart by their token
/// tensors: the views of [`BatchState::leading`] made once each have a step of their own.
pub struct BatchDecoder<'a> {
    model: &'a StaticLlama,
    captured: bool,
    /// Batches stepped eagerly once (their token tensors' ids).
    warm: Vec<candle_core::TensorId>,
    graphs: Vec<CapturedStep>,
}

impl<'a> BatchDecoder<'a> {
    pub fn new(model: &'a StaticLlama, captured: bool) -> Self {
        // only the fused step has fixed shapes and arguments at every position
        let captured = captured && model.decodes_fused();
        Self {
            model,
            captured,
            warm: Vec::new(),
            graphs: Vec::new(),
        }
    }

    /// One step of every slot of `batch` (a captured step replays on the tensors it was
    /// captured with: a batch's own step is found by its token tensor).
    pub fn step(&mut self, batch: &BatchState) -> Result<BatchOutput> {
        let id = batch.tokens.id();
        if !self.captured {
            return self.model.step_batch(batch);
        }
        if !self.warm.contains(&id) {
            self.warm.push(id);
            return self.model.step_batch(batch);
        }
        if let Some((_, graph, out)) = self.graphs.iter().find(|(on, _, _)| *on == id) {
            graph.replay()?;
            return Ok(out.clone());
        }
        let Device::Rocm(rocm) = self.model.device() else {
            candle_core::bail!("static llama: capture needs Device::Rocm");
        };
        let model = self.model;
        let (graph, out) = rocm.capture(|| model.step_batch(batch))?;
        // the capture recorded the step without running it
        graph.replay()?;
        self.graphs.push((id, graph, out.clone()));
        Ok(out)
    }
}
