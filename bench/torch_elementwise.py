"""torch eager on the same ops and sizes as examples/elementwise_bench.rs, then one markdown
table: ours, torch, and the copy ceiling measured in the same run.
Usage: python3 torch_elementwise.py OURS.jsonl OUT.md"""
import sys

import torch
import torch.nn.functional as F

from benchlib import bandwidth_table, read_lines, time_ms, write

BYTES = 256 << 20


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
    ours = read_lines(sys.argv[1])
    write(bandwidth_table(ours, torch_rows(), "256 MiB per operand"), sys.argv[2])


main()
