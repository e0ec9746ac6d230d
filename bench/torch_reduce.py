"""torch eager on the ops and sizes of crates/rocm-reduce/examples/reduce_bench.rs, merged with
that bench's lines into one markdown table. Usage: python3 torch_reduce.py OURS.jsonl OUT.md"""
import sys

import torch
import torch.nn.functional as F

from benchlib import bandwidth_table, read_lines, time_ms, write

BYTES = 256 << 20


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
    ours = read_lines(sys.argv[1])
    write(bandwidth_table(ours, torch_rows(), "256 MiB input"), sys.argv[2])


main()
