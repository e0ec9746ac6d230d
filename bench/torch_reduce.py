"""torch eager on the ops and sizes of crates/rocm-reduce/examples/reduce_bench.rs, merged with
that bench's lines into one markdown table. Usage: python3 torch_reduce.py OURS.jsonl OUT.md"""
import json
import sys

import torch
import torch.nn.functional as F

BYTES = 256 << 20
ITERS = 20


def time_ms(f):
    for _ in range(3):
        f()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(ITERS):
        f()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / ITERS


def torch_rows():
    rows = {}
    for dt, name in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
        n = BYTES // torch.tensor([], dtype=dt).element_size()
        x = torch.full((n // 4096, 4096), 0.01, dtype=dt, device="cuda")
        rows[("sum rows of 4096", name)] = time_ms(lambda: x.sum(1))
        rows[("sum all", name)] = time_ms(lambda: x.sum())
        rows[("max rows of 4096", name)] = time_ms(lambda: x.amax(1))
        rows[("argmax rows of 4096", name)] = time_ms(lambda: x.argmax(1))
        for length in [1024, 4096, 32768]:
            xr = x.view(-1, length)
            w = torch.full((length,), 1.0, dtype=dt, device="cuda")
            rows[(f"softmax rows of {length}", name)] = time_ms(lambda: torch.softmax(xr, -1))
            rows[(f"rms_norm rows of {length}", name)] = time_ms(lambda: F.rms_norm(xr, (length,), w, 1e-5))
            rows[(f"layer_norm rows of {length}", name)] = time_ms(lambda: F.layer_norm(xr, (length,), w, w, 1e-5))
    return rows


def main():
    ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    theirs = torch_rows()
    ceiling = next(r for r in ours if r["op"].startswith("copy"))
    lines = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; copy ceiling "
        f"{ceiling['gbps']:.0f} GB/s (same run); 256 MiB input.",
        "",
        "| op | dtype | ours GB/s | % of copy | torch GB/s | ours / torch |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in ours:
        if r is ceiling:
            continue
        t = theirs.get((r["op"], r["dtype"]))
        tg = r["bytes"] / (t * 1e-3) / 1e9 if t else float("nan")
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['gbps']:.0f} | {100 * r['gbps'] / ceiling['gbps']:.0f}% "
            f"| {tg:.0f} | {r['gbps'] / tg:.2f} |"
        )
    text = "\n".join(lines)
    print(text)
    with open(sys.argv[2], "w") as f:
        f.write(text + "\n")


main()
