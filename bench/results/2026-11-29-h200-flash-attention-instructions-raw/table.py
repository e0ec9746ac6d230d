"""The final run's table: each build's best of its two passes (TFLOP/s), torch SDPA's flash
backend from the same run (final/table.md, written by bench/torch_attention.py).
Usage: python3 table.py final"""
import json
import re
import sys

d = sys.argv[1]


def load(path):
    out = {}
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            out[(r["dtype"], r["head_dim"], r["seq"], r["causal"])] = r["tflops"]
    return out


torch = {}
for line in open(f"{d}/table.md"):
    m = re.match(r"\| (bf16|f16) \| (\d+) \| (\d+) \| (yes|no) \| [\d.]+ \| [^|]+ \| ([\d.]+) \|", line)
    if m:
        torch[(m[1], int(m[2]), int(m[3]), m[4] == "yes")] = float(m[5])
builds = ["before", "v4", "v5"]
runs = {b: [load(f"{d}/ab-{b}-{p}.jsonl") for p in (1, 2)] for b in builds}
print("| dtype | head_dim | seq | causal | before | step 1 | final | torch SDPA flash | final / torch | before / torch |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for k, t in torch.items():
    best = {b: max(r[k] for r in runs[b]) for b in builds}
    print(f"| {k[0]} | {k[1]} | {k[2]} | {'yes' if k[3] else 'no'} | {best['before']:.1f} | {best['v4']:.1f} "
          f"| {best['v5']:.1f} | {t:.1f} | **{best['v5'] / t:.2f}** | {best['before'] / t:.2f} |")
