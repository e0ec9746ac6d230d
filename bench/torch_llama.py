"""torch eager on candle-rocm-bench's llama: the same weights (the safetensors file the Rust
bench wrote), the same prompt, prefill and greedy decode, timed the same way.
HF transformers' LlamaForCausalLM where transformers is installed, else a plain llama on
torch's scaled_dot_product_attention.
Usage: python3 torch_llama.py WEIGHTS.safetensors CONFIG.json OUT.jsonl [LOGITS.f32] [--f32]
(--f32: the model in f32, the reference run)"""
import json
import struct
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}


def load_safetensors(path):
    """Tensors of a safetensors file, on the host (the format: u64 header size, JSON, data)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        t = torch.frombuffer(data[lo:hi], dtype=torch.uint8).view(DTYPES[meta["dtype"]])
        out[name] = t.reshape(meta["shape"])
    return out


class PlainLlama:
    """Llama with a K-V cache: RMSNorm, rotary embedding on halves, grouped-query attention."""

    def __init__(self, w, cfg, dtype):
        self.w, self.cfg = w, cfg
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, device="cuda").float() / hd))
        pos = torch.arange(cfg["max_position_embeddings"], device="cuda").float()
        freqs = torch.outer(pos, inv)
        self.cos = torch.cat([freqs.cos()] * 2, -1).to(dtype)
        self.sin = torch.cat([freqs.sin()] * 2, -1).to(dtype)

    def norm(self, x, name):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        return self.w[name] * xf.to(x.dtype)

    def rope(self, x, pos):
        t = x.shape[2]
        cos, sin = self.cos[pos:pos + t], self.sin[pos:pos + t]
        d = x.shape[-1] // 2
        rot = torch.cat([-x[..., d:], x[..., :d]], -1)
        return x * cos + rot * sin

    def new_cache(self):
        return [None] * self.cfg["num_hidden_layers"]

    def forward(self, ids, pos, cache):
        cfg, w = self.cfg, self.w
        nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        b, t = ids.shape
        x = w["model.embed_tokens.weight"][ids]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = self.norm(x, p + "input_layernorm.weight")
            q = (h @ w[p + "self_attn.q_proj.weight"].t()).view(b, t, nh, -1).transpose(1, 2)
            k = (h @ w[p + "self_attn.k_proj.weight"].t()).view(b, t, nkv, -1).transpose(1, 2)
            v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(b, t, nkv, -1).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], 2)
                v = torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(b, t, -1) @ w[p + "self_attn.o_proj.weight"].t()
            h = self.norm(x, p + "post_attention_layernorm.weight")
            g = F.silu(h @ w[p + "mlp.gate_proj.weight"].t()) * (h @ w[p + "mlp.up_proj.weight"].t())
            x = x + g @ w[p + "mlp.down_proj.weight"].t()
        x = self.norm(x[:, -1], "model.norm.weight")
        return x @ w["lm_head.weight"].t()


class HfLlama:
    def __init__(self, w, cfg, dtype):
        import transformers

        c = transformers.LlamaConfig(
            hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"], num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=cfg["num_attention_heads"],
            num_key_value_heads=cfg["num_key_value_heads"], rms_norm_eps=cfg["rms_norm_eps"],
            rope_theta=cfg["rope_theta"], max_position_embeddings=cfg["max_position_embeddings"],
            tie_word_embeddings=False)
        # built in the run's dtype on the GPU, so the allocator's peak is the model's
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device("cuda"):
                self.model = transformers.LlamaForCausalLM(c).eval()
        finally:
            torch.set_default_dtype(default)
        missing, unexpected = self.model.load_state_dict(w, strict=False)
        if missing or unexpected:
            raise RuntimeError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
        self.version = transformers.__version__

    def new_cache(self):
        import transformers

        return transformers.DynamicCache()

    def forward(self, ids, pos, cache):
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        return out.logits[:, -1]


@torch.inference_mode()
def main():
    args = [a for a in sys.argv[1:] if a != "--f32"]
    dtype = torch.float32 if "--f32" in sys.argv else torch.bfloat16
    weights_path, cfg_path, out_path = args[:3]
    cfg = json.load(open(cfg_path))
    # the bf16 weights convert exactly: an f32 run is the same model, rounded less
    w = {k: v.to(dtype) for k, v in load_safetensors(weights_path).items()}
    try:
        model = HfLlama(w, cfg, dtype)
        impl = f"HF transformers {model.version} LlamaForCausalLM"
    except ImportError:
        model = PlainLlama({k: v.to("cuda") for k, v in w.items()}, cfg, dtype)
        impl = "plain llama on torch SDPA (HF transformers is not installed)"
    del w
    torch.cuda.reset_peak_memory_stats()
    prompt = torch.tensor([cfg["prompt"]], device="cuda")
    prefill = []
    for run in range(cfg["repeats"] + 1):
        cache = model.new_cache()
        torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model.forward(prompt, 0, cache)
        nxt = int(logits.argmax(-1).item())
        if run > 0:
            prefill.append(time.perf_counter() - start)
        else:
            # the warm-up also decodes, as the Rust bench's does
            tok = nxt
            for step in range(2):
                out = model.forward(torch.tensor([[tok]], device="cuda"), len(cfg["prompt"]) + step, cache)
                tok = int(out.argmax(-1).item())
    if len(args) > 3:
        logits[0].float().cpu().numpy().tofile(args[3])
    tokens = [nxt]
    n = len(cfg["prompt"])
    start = time.perf_counter()
    for step in range(1, cfg["decode_tokens"]):
        logits = model.forward(torch.tensor([[nxt]], device="cuda"), n + step - 1, cache)
        nxt = int(logits.argmax(-1).item())
        tokens.append(nxt)
    decode = time.perf_counter() - start
    prefill.sort()
    row = {"bench": "model", "device": "torch", "dtype": "f32" if dtype == torch.float32 else "bf16",
           "impl": impl, "torch": torch.__version__,
           "prefill_tokens": n, "decode_tokens": cfg["decode_tokens"],
           "prefill_seconds": prefill, "prefill_tokens_per_s": n / prefill[len(prefill) // 2],
           "decode_tokens_per_s": (cfg["decode_tokens"] - 1) / decode, "tokens": tokens,
           "allocator_peak_bytes": torch.cuda.max_memory_allocated()}
    print(json.dumps(row))
    with open(out_path, "a") as f:
        f.write(json.dumps(row) + "\n")


main()
