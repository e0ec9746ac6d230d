"""torch eager on the cases of candle-rocm-bench's op benchmark (same ops, shapes, dtypes and
the same timing: batches of calls between two synchronizations, median over batches).
Usage: python3 torch_candle_ops.py OPS.jsonl OUT.jsonl [--quick]"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def uniform(shape, dt):
    return (torch.rand(shape, device="cuda") * 2 - 1).to(dt)


def ids(shape, n):
    return torch.randint(0, n, shape, device="cuda", dtype=torch.int64)


def rope_halves(x, cos, sin):
    # candle_nn::rotary_emb::rope: the first and second halves of the head form the pairs
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def rope_interleaved(x, cos, sin):
    # candle_nn::rotary_emb::rope_i: neighbouring elements form the pairs
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def build(case):
    """The timed call of one case, its inputs made on the GPU."""
    op, dt, s, p = case["op"], DTYPES[case["dtype"]], case["shapes"], case["params"]
    x = uniform(s[0], dt) if op not in ("where_cond",) else None
    if op == "copy":
        return lambda: x.clone()
    if op == "transpose copy":
        return lambda: x.t().contiguous()
    if op == "exp":
        return lambda: torch.exp(x)
    if op == "gelu":
        # Candle's gelu is the tanh approximation
        return lambda: F.gelu(x, approximate="tanh")
    if op == "affine":
        return lambda: x * 0.5 + 0.25
    if op == "add":
        y = uniform(s[1], dt)
        return lambda: x + y
    if op == "add broadcast row":
        y = uniform(s[1], dt)
        return lambda: x + y
    if op == "cast to the other float":
        to = torch.bfloat16 if dt == torch.float32 else torch.float32
        return lambda: x.to(to)
    if op == "where_cond":
        mask = uniform(s[0], torch.float32) >= 0
        a, b = uniform(s[1], dt), uniform(s[2], dt)
        return lambda: torch.where(mask, a, b)
    if op == "sum last dim":
        return lambda: x.sum(-1, keepdim=True)
    if op == "sum all":
        return lambda: x.sum()
    if op == "max last dim":
        return lambda: x.amax(-1, keepdim=True)
    if op == "argmax last dim":
        return lambda: x.argmax(-1, keepdim=True)
    if op == "softmax last dim":
        return lambda: torch.softmax(x, -1)
    if op == "rms_norm":
        w = uniform([s[0][1]], dt)
        return lambda: F.rms_norm(x, (s[0][1],), w, 1e-5)
    if op == "layer_norm":
        w, b = uniform([s[0][1]], dt), uniform([s[0][1]], dt)
        return lambda: F.layer_norm(x, (s[0][1],), w, b, 1e-5)
    if op in ("rope", "rope_i"):
        t, d = s[0][2], s[0][3]
        cos, sin = uniform([t, d // 2], dt), uniform([t, d // 2], dt)
        f = rope_halves if op == "rope" else rope_interleaved
        return lambda: f(x, cos, sin)
    if op == "index_select rows":
        i = ids(s[1], s[0][0])
        return lambda: x.index_select(0, i)
    if op == "gather last dim":
        i = ids(s[1], s[0][1])
        return lambda: x.gather(-1, i)
    if op == "index_add rows":
        i, src = ids(s[1], s[0][0]), uniform(s[2], dt)
        return lambda: x.index_add(0, i, src)
    if op == "scatter_add last dim":
        i, src = ids(s[1], s[0][1]), uniform(s[2], dt)
        return lambda: x.scatter_add(-1, i, src)
    if op in ("matmul", "batched matmul q k^t"):
        y = uniform(s[1], dt)
        return lambda: x @ y
    if op == "conv2d 3x3":
        w = uniform(s[1], dt)
        return lambda: F.conv2d(x, w, padding=p[0], stride=p[1])
    if op == "conv_transpose2d 4x4 stride 2":
        w = uniform(s[1], dt)
        return lambda: F.conv_transpose2d(x, w, padding=p[0], stride=p[1])
    if op == "max_pool2d 2x2":
        return lambda: F.max_pool2d(x, p[0])
    if op == "avg_pool2d 2x2":
        return lambda: F.avg_pool2d(x, p[0])
    raise ValueError(f"no torch peer for {op}")


def median_seconds_per_call(f, quick):
    """The timing of candle-rocm-bench (timing.rs), in torch."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start = time.perf_counter()
    f()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - start, 1e-7)
    batch_seconds, batches = (1e-3, 3) if quick else (5e-3, 9)
    per_batch = min(max(math.ceil(batch_seconds / one), 1), 5000)
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            f()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / per_batch)
    samples.sort()
    return samples[len(samples) // 2]


def main():
    quick = "--quick" in sys.argv
    seen = set()
    with open(sys.argv[2], "w") as out:
        for line in open(sys.argv[1]):
            if not line.startswith("{"):
                continue
            case = json.loads(line)
            key = (case["op"], case["dtype"], case["size"])
            if case.get("bench") != "op" or key in seen:
                continue
            seen.add(key)
            row = {k: case[k] for k in ("bench", "family", "op", "dtype", "size", "shapes", "params")}
            row["device"] = "torch"
            for k in ("bytes", "flops"):
                if k in case:
                    row[k] = case[k]
            try:
                row["us"] = median_seconds_per_call(build(case), quick) * 1e6
            except Exception as e:  # a refused op is a row of the table
                row["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
            torch.cuda.empty_cache()
            print(f"{row['family']:<14} {row['op']:<32} {row['dtype']:<5} {row['size']:<5} torch    "
                  f"{row.get('us', float('nan')):.2f} us {row.get('error', '')}", file=sys.stderr)
            out.write(json.dumps(row) + "\n")


main()
