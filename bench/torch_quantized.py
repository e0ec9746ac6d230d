"""The peer of crates/rocm-quantized/examples/quantized_bench.rs: torch has no GGUF kernels, so
the rows compare our quantized mat-vec with torch's bf16 mat-vec of the same shape (3.6x the
weight bytes of Q4_0), and our prefill with torch's bf16 matmul; merged into one markdown table.
Usage: python3 torch_quantized.py OURS.jsonl OUT.md"""
import re
import sys

import torch

from benchlib import read_lines, time_ms, write

ROTATE_BYTES = 200 << 20


def bf16_ms(n, k, m):
    """torch bf16 x (m, k) @ w.T, weights rotated over copies past 200 MB as ours are."""
    copies = max(1, -(-ROTATE_BYTES // (n * k * 2)))
    ws = [torch.full((n, k), 0.01, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
    x = torch.full((m, k), 0.01, dtype=torch.bfloat16, device="cuda")
    state = {"i": 0}

    def call():
        state["i"] += 1
        return x @ ws[state["i"] % copies].T

    ms = time_ms(call)
    del ws
    torch.cuda.empty_cache()
    return ms


def main():
    ours = read_lines(sys.argv[1])
    ceiling = next(r for r in ours if r["op"].startswith("copy"))
    rows = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; copy ceiling "
        f"{ceiling['gbps']:.0f} GB/s (device-to-device copy, same run). Mat-vec: GB/s on the "
        "quantized weight bytes (q8 activations quantized in the same call, in the mat-vec's own "
        "launch where they fit its shared memory); weights rotated over "
        "copies past 200 MB. torch: bf16 weights of the same shape.",
        "",
        "| op | type | ours GB/s | % of copy | ours ms | host ms per call | torch bf16 ms | ours / torch time |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    cache = {}
    # the host's queueing time of each mat-vec, on a line after the mat-vec's own
    host = {(r["op"][len("host "):], r["dtype"]): r["host_ms"] for r in ours if r["op"].startswith("host")}
    prefill, crossover = [], []
    for r in ours:
        if r is ceiling:
            continue
        if r["op"].startswith("prefill"):
            prefill.append(r)
            continue
        if r["op"].startswith("rows"):
            crossover.append(r)
            continue
        if r["op"].startswith("host"):
            continue
        n, k, m = map(int, re.match(r"matvec (\d+)x(\d+) batch (\d+)", r["op"]).groups())
        t = cache.setdefault((n, k, m), bf16_ms(n, k, m))
        rows.append(
            f"| {r['op']} | {r['dtype']} | {r['gbps']:.0f} | {100 * r['gbps'] / ceiling['gbps']:.0f}% "
            f"| {r['ms']:.4f} | {host.get((r['op'], r['dtype']), float('nan')):.4f} | {t:.4f} "
            f"| {r['ms'] / t:.2f} |"
        )
    rows += [
        "",
        "Host ms per call: the host's time to queue one call (quantize and mat-vec launches, "
        "allocations) with the device left to run behind; where it is near the call's time, the host "
        "sets the pace.",
        "",
        "Prefill, 512 rows of activations: ours (weights dequantized to bf16 a 64 MiB slice at a time, "
        "each slice one gemm; f32 activations rounded to bf16 first, f32 output) against one bf16 gemm "
        "on weights already in bf16 (our BLAS) and torch's bf16 matmul.",
        "",
        "| op | type | ours bf16 x TFLOP/s | ours f32 x TFLOP/s | bf16 gemm TFLOP/s | torch bf16 TFLOP/s | ours bf16 / bf16 gemm |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in prefill:
        n, k, m = map(int, re.match(r"prefill (\d+)x(\d+) batch (\d+)", r["op"]).groups())
        t = cache.setdefault((n, k, m), bf16_ms(n, k, m))
        torch_tflops = 2 * m * n * k / (t * 1e-3) / 1e12
        rows.append(
            f"| {r['op']} | {r['dtype']} | {r['ours_tflops']:.0f} | {r['ours_f32_tflops']:.0f} "
            f"| {r['bf16_gemm_tflops']:.0f} "
            f"| {torch_tflops:.0f} | {r['ours_tflops'] / r['bf16_gemm_tflops']:.2f} |"
        )
    rows += [
        "",
        "16 to 64 rows of f32 activations: the integer kernel (each weight row read once, the rows in "
        "groups of 8) against dequantize + gemm; `INTEGER_MAX_ROWS` is set from this table.",
        "",
        "| op | type | integer ms | dequantize + gemm ms | faster |",
        "|---|---|---:|---:|---|",
    ]
    for r in crossover:
        faster = "integer" if r["integer_ms"] < r["dequantize_gemm_ms"] else "dequantize + gemm"
        rows.append(
            f"| {r['op']} | {r['dtype']} | {r['integer_ms']:.4f} | {r['dequantize_gemm_ms']:.4f} | {faster} |"
        )
    write("\n".join(rows), sys.argv[2])


main()
