"""torch's scaled_dot_product_attention with its flash backend on the shapes of
crates/rocm-attention/examples/attention_bench.rs (q, k, v [batch, seq, heads, head_dim] as
Candle holds them, seen by torch as [batch, heads, seq, head_dim]), merged with that bench's
lines into one markdown table; with BEFORE.jsonl (the same bench on another build of ours, same
run) a column of its figures beside.
Usage: python3 torch_attention.py OURS.jsonl OUT.md [BEFORE.jsonl]"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchlib import read_lines, time_ms, write

DT = {"bf16": torch.bfloat16, "f16": torch.float16}


def main():
    rows = read_lines(sys.argv[1])
    key = lambda r: (r["dtype"], r["head_dim"], r["seq"], r["causal"])
    before = {key(r): r["tflops"] for r in read_lines(sys.argv[3])} if len(sys.argv) > 3 else None
    lines = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}. Forward attention, "
        "TFLOP/s (4 x batch x heads x seq^2 x head_dim, halved when causal); 16K tokens a call "
        "(batch = 16384 / seq, heads = 2048 / head_dim); device events, same run. Extra MiB: "
        "device memory a call takes beyond q, k, v and its output.",
        "",
        "| dtype | head_dim | seq | causal | ours (tiled) | ours (portable) | torch SDPA flash "
        "| ours / torch | ours extra MiB | torch extra MiB |" + (" ours before | before / torch |" if before else ""),
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if before else ""),
    ]
    for r in rows:
        dt = DT[r["dtype"]]
        b, s, h, d = r["batch"], r["seq"], r["heads"], r["head_dim"]
        q, k, v = (
            torch.randn(b, s, h, d, dtype=dt, device="cuda").transpose(1, 2) for _ in range(3)
        )
        scale = d ** -0.5

        def call():
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=r["causal"], scale=scale
            )

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = call()
            torch.cuda.synchronize()
            extra = torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size()
            del out
            t = time_ms(call, iters=10)
        flops = 4 * b * h * s * s * d / (2 if r["causal"] else 1)
        theirs = flops / t / 1e9
        portable = r["portable_tflops"]
        lines.append(
            f"| {r['dtype']} | {d} | {s} | {'yes' if r['causal'] else 'no'} | {r['tflops']:.1f} "
            f"| {'-' if portable is None else f'{portable:.1f}'} | {theirs:.1f} "
            f"| {r['tflops'] / theirs:.2f} | {r['extra_bytes'] / 2**20:.1f} | {max(extra, 0) / 2**20:.1f} |"
            + (f" {before[key(r)]:.1f} | {before[key(r)] / theirs:.2f} |" if before and key(r) in before else
               (" - | - |" if before else ""))
        )
    write("\n".join(lines), sys.argv[2])


main()
