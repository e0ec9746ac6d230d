"""torch eager on the ops and shapes of crates/rocm-indexing/examples/indexing_bench.rs, merged
with that bench's lines into one markdown table. Usage: python3 torch_indexing.py OURS.jsonl OUT.md"""
import sys

import torch

from benchlib import bandwidth_table, read_lines, time_ms, write

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def torch_rows():
    rows = {}
    dev = "cuda"
    n_rows, width, n_ids = 32000, 4096, 8192
    ids = torch.randint(0, n_rows, (n_ids,), device=dev)
    for name in ["f16", "bf16", "f32"]:
        table = torch.full((n_rows, width), 0.5, dtype=DTYPES[name], device=dev)
        rows[("index_select 8192 of 32000 rows x 4096", name)] = time_ms(lambda: table.index_select(0, ids))
    gids = torch.randint(0, width, (n_ids, width), device=dev)
    for name in ["bf16", "f32"]:
        x = torch.full((n_ids, width), 0.5, dtype=DTYPES[name], device=dev)
        rows[("gather (8192, 4096) along dim 1", name)] = time_ms(lambda: torch.gather(x, 1, gids))
    f32 = torch.float32
    dst = torch.zeros((n_rows, width), dtype=f32, device=dev)
    src = torch.full((n_ids, width), 0.5, dtype=f32, device=dev)
    t = time_ms(lambda: dst.index_add_(0, ids, src))
    for tag in ["ownership", "per update"]:
        rows[(f"index_add 8192 rows x 4096 ({tag})", "f32")] = t
    del dst
    dst = torch.zeros((1024, 1 << 16), dtype=f32, device=dev)
    src = torch.full((512, 1 << 16), 0.5, dtype=f32, device=dev)
    rids = torch.randint(0, 1024, (512,), device=dev)
    t = time_ms(lambda: dst.index_add_(0, rids, src))
    for tag in ["ownership", "per update"]:
        rows[(f"index_add 512 rows x 65536 ({tag})", "f32")] = t
    del dst
    dst = torch.zeros((16, 1024), dtype=f32, device=dev)
    src = torch.full((16, 1 << 18), 0.5, dtype=f32, device=dev)
    cids = torch.randint(0, 1024, (16, 1 << 18), device=dev)
    t = time_ms(lambda: dst.scatter_add_(1, cids, src))
    for tag in ["ownership", "per update"]:
        rows[(f"scatter_add (16, 2^18) into (16, 1024) ({tag})", "f32")] = t
    dst = torch.zeros((64, 1 << 20), dtype=f32, device=dev)
    src = torch.full((8, 1 << 20), 0.5, dtype=f32, device=dev)
    cids = torch.randint(0, 64, (8, 1 << 20), device=dev)
    t = time_ms(lambda: dst.scatter_add_(0, cids, src))
    for tag in ["ownership", "per update"]:
        rows[(f"scatter_add (8, 2^20) into (64, 2^20) ({tag})", "f32")] = t
    for r, length in [(64, 32000), (1 << 16, 64)]:
        x = torch.rand((r, length), device=dev)
        rows[(f"arg_sort {r} rows of {length}", "f32")] = time_ms(
            lambda: torch.argsort(x, dim=-1, descending=True, stable=True))
    return rows


def main():
    ours = read_lines(sys.argv[1])
    write(bandwidth_table(ours, torch_rows(), "int64 ids for torch, u32 for ours"), sys.argv[2])


main()
