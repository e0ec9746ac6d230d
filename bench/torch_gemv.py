"""torch on the shapes of crates/rocm-blas/examples/gemv_bench.rs (F.linear for one weight,
torch.matmul over w^T for a matrix a batch entry; matrices rotated over 200 MB of copies, as
there), beside that bench's lines (the gemv kernel and the BLAS).
Usage: python3 torch_gemv.py OURS.jsonl OUT.md"""
import sys

import torch
import torch.nn.functional as F

from benchlib import bandwidth_table, read_lines, time_ms, write

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROTATE_BYTES = 200 << 20


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    ours = read_lines(sys.argv[1])
    theirs = {}
    for r in ours:
        if not r["op"].startswith("gemv"):
            continue
        b, m, n, k = (int(v) for v in r["op"].split()[1].split("x"))
        key = (f"gemv {b}x{m}x{n}x{k}", r["dtype"])
        if key not in theirs:
            dt = DT[r["dtype"]]
            copies = max(1, -(-ROTATE_BYTES // r["bytes"]))
            ws = [torch.full((b, n, k), 0.01, dtype=dt, device="cuda") for _ in range(copies)]
            x = torch.full((b, m, k), 0.01, dtype=dt, device="cuda")
            state = {"i": 0}

            def call():
                state["i"] += 1
                w = ws[state["i"] % copies]
                # one weight: F.linear; a matrix a batch entry: a batched matmul over w^T
                return F.linear(x[0], w[0]) if b == 1 else torch.matmul(x, w.transpose(1, 2))

            theirs[key] = time_ms(call)
            del ws
        theirs[(r["op"], r["dtype"])] = theirs[key]
    write(bandwidth_table(ours, theirs, "weight bytes only; (BLAS): the same product with the "
                          "gemv kernel off; torch: F.linear, torch.matmul for the scores"), sys.argv[2])


main()
