"""torch.matmul on the shapes of crates/rocm-blas/examples/matmul_bench.rs, merged with that
bench's lines (ours vs a direct cuBLAS call) into one markdown table.
Usage: python3 torch_matmul.py OURS.jsonl OUT.md"""
import sys

import torch

from benchlib import read_lines, time_ms, write

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def main():
    # Candle's default: no TF32 for f32 matmuls; torch's default is the same.
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = read_lines(sys.argv[1])
    lines = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}. TFLOP/s; overhead = "
        "ours / direct cuBLAS call - 1 (same process, same stream, device events).",
        "",
        "| shape | dtype | ours | direct cuBLAS | overhead | torch.matmul |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        dt = DT[r["dtype"]]
        b, m, n, k = r["batch"], r["m"], r["n"], r["k"]
        x = torch.full((b, m, k), 0.01, dtype=dt, device="cuda")
        if r["shape"].startswith("decode"):
            w = torch.full((k, n), 0.01, dtype=dt, device="cuda")
        else:
            w = torch.full((b, k, n), 0.01, dtype=dt, device="cuda")
        t = time_ms(lambda: torch.matmul(x, w))
        tflops = 2 * b * m * n * k / t / 1e9
        lines.append(
            f"| {r['shape']} | {r['dtype']} | {r['ours_tflops']:.1f} | {r['cublas_tflops']:.1f} "
            f"| {r['overhead_pct']:+.1f}% | {tflops:.1f} |"
        )
    write("\n".join(lines), sys.argv[2])


main()
