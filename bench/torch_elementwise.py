"""torch eager on the same ops and sizes as examples/elementwise_bench.rs, then one markdown
table: ours, torch, and the copy ceiling measured in the same run.
Usage: python3 torch_elementwise.py OURS.jsonl OUT.md"""
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
    for dt, name in [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")]:
        w = torch.tensor([], dtype=dt).element_size()
        n = BYTES // w
        x = torch.full((n,), 0.01, dtype=dt, device="cuda")
        y = torch.full((n,), 0.02, dtype=dt, device="cuda")
        out = torch.empty_like(x)
        rows[("exp", name)] = time_ms(lambda: torch.exp(x, out=out))
        rows[("silu", name)] = time_ms(lambda: F.silu(x))
        rows[("gelu", name)] = time_ms(lambda: F.gelu(x, approximate="tanh"))
        rows[("affine", name)] = time_ms(lambda: torch.add(x * 1.5, 0.25))
        rows[("add", name)] = time_ms(lambda: torch.add(x, y, out=out))
        rows[("mul", name)] = time_ms(lambda: torch.mul(x, y, out=out))
        xm = x.view(-1, 4096)
        bias = y[:4096].view(1, 4096)
        rows[("add broadcast (r,4096)+(1,4096)", name)] = time_ms(lambda: torch.add(xm, bias, out=out.view(-1, 4096)))
        rows[("transpose copy (4096,r)", name)] = time_ms(lambda: xm.t().contiguous())
        if name != "f32":
            wide = torch.full((n,), 0.5, dtype=torch.float32, device="cuda")
            rows[(f"cast f32->{name}", name)] = time_ms(lambda: wide.to(dt))
            rows[(f"cast {name}->f32", name)] = time_ms(lambda: x.to(torch.float32))
    return rows


def main():
    ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    theirs = torch_rows()
    ceiling = next(r for r in ours if r["op"].startswith("copy"))
    lines = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; copy ceiling "
        f"{ceiling['gbps']:.0f} GB/s (device-to-device copy, same run); 256 MiB per operand.",
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
