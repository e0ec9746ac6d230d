"""torch (cuDNN) on the layers of crates/rocm-dnn/examples/conv_bench.rs, merged with that
bench's lines into one markdown table. Usage: python3 torch_conv.py OURS.jsonl OUT.md"""
import sys

import torch
import torch.nn.functional as F

from benchlib import read_lines, time_ms, write

DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def torch_ms(r):
    dt = DT[r["dtype"]]
    if r.get("pool"):
        x = torch.full((8, 64, 112, 112), 0.01, dtype=dt, device="cuda")
        f = F.max_pool2d if r["max"] else F.avg_pool2d
        return time_ms(lambda: f(x, 2, 2))
    b, ci, co, h, w, k = r["b"], r["c_in"], r["c_out"], r["h"], r["w"], r["k"]
    x = torch.full((b, ci, h, w), 0.01, dtype=dt, device="cuda")
    if r["transpose"]:
        wt = torch.full((ci, co, k, k), 0.01, dtype=dt, device="cuda")
        return time_ms(lambda: F.conv_transpose2d(x, wt, stride=r["stride"], padding=r["padding"]))
    wt = torch.full((co, ci, k, k), 0.01, dtype=dt, device="cuda")
    return time_ms(lambda: F.conv2d(x, wt, stride=r["stride"], padding=r["padding"]))


def main():
    rows = read_lines(sys.argv[1])
    lines = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
        f"{torch.backends.cudnn.version()} (benchmark mode off, torch's default). Ours: the "
        "portable path (im2col + gemm, gemm + col2im); gemm alone: its cuBLAS call on the same "
        "matrices, the floor of that path.",
        "",
        "| layer | dtype | ours ms | gemm alone ms | torch ms | ours TFLOP/s | torch TFLOP/s "
        "| ours / torch speed |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t = torch_ms(r)
        if r.get("pool"):
            lines.append(
                f"| {r['layer']} | {r['dtype']} | {r['ours_ms']:.3f} | - | {t:.3f} | "
                f"{r['gbps']:.0f} GB/s | - | {t / r['ours_ms']:.2f} |"
            )
            continue
        tflops = r["ours_tflops"] * r["ours_ms"] / t
        lines.append(
            f"| {r['layer']} | {r['dtype']} | {r['ours_ms']:.3f} | {r['gemm_ms']:.3f} | {t:.3f} "
            f"| {r['ours_tflops']:.1f} | {tflops:.1f} | {t / r['ours_ms']:.2f} |"
        )
    write("\n".join(lines), sys.argv[2])


main()
