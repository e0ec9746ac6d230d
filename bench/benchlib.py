"""Shared by the torch peers of the benchmarks: event timing and the bandwidth table."""
import json

import torch

ITERS = 20


def time_ms(f, iters=ITERS):
    """Mean milliseconds per call of f on the current CUDA stream, after 3 warm-up calls."""
    for _ in range(3):
        f()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        f()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / iters


def read_lines(path):
    """The JSON objects a Rust bench printed, one per line."""
    return [json.loads(line) for line in open(path) if line.startswith("{")]


def write(text, path):
    print(text)
    with open(path, "w") as f:
        f.write(text + "\n")


def bandwidth_table(ours, theirs, note):
    """ours: the bench's lines, the first a copy ceiling; theirs: {(op, dtype): torch ms}."""
    ceiling = next(r for r in ours if r["op"].startswith("copy"))
    lines = [
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; copy ceiling "
        f"{ceiling['gbps']:.0f} GB/s (device-to-device copy, same run); {note}.",
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
    return "\n".join(lines)
