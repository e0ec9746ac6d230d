"""torch.distributed (NCCL) all-reduce on the sizes of crates/rocm-ccl/examples/ccl_bench.rs, one
process a GPU, timed with CUDA events on rank 0; merged with that bench's lines into one
markdown table. Usage: python3 torch_ccl.py OURS.jsonl OUT.md"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES_MIB = [1, 8, 32, 128, 256]
ITERS = 20


def rank_main(rank, size, queue):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29641")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=size, device_id=torch.device("cuda", rank))
    rows = []
    for dtype, name in [(torch.bfloat16, "bf16"), (torch.float32, "f32")]:
        for mib in SIZES_MIB:
            n = (mib << 20) // torch.tensor([], dtype=dtype).element_size()
            x = torch.zeros(n, dtype=dtype, device="cuda")
            for _ in range(3):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(ITERS):
                dist.all_reduce(x)
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / ITERS
            alg = (mib << 20) / (ms * 1e-3) / 1e9
            rows.append({"peer": "torch.distributed", "ranks": size, "dtype": name, "bytes": mib << 20,
                         "ms": ms, "algbw_gbs": alg, "busbw_gbs": alg * 2 * (size - 1) / size})
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main():
    ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    size = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(rank_main, args=(size, queue), nprocs=size, join=True)
    theirs = {(r["dtype"], r["bytes"]): r for r in queue.get()}
    lines = [
        f"# All-reduce (sum), {size} GPUs: rocm-ccl against torch.distributed (NCCL), same run",
        "",
        f"{torch.cuda.get_device_name(0)} x {size}, torch {torch.__version__}, NCCL "
        f"{'.'.join(map(str, torch.cuda.nccl.version()))} (torch's). Bus bandwidth = algorithm bandwidth x "
        f"2 (n - 1) / n. rocm-ccl: one thread a GPU; torch: one process a GPU; {ITERS} in-place all-reduces "
        "timed with device events on rank 0 after 3 warm-ups.",
        "",
        "| dtype | size | rocm-ccl ms | rocm-ccl bus GB/s | torch ms | torch bus GB/s | ours / torch |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for o in ours:
        t = theirs.get((o["dtype"], o["bytes"]))
        if t is None:
            continue
        lines.append(
            f"| {o['dtype']} | {o['bytes'] >> 20} MiB | {o['ms']:.3f} | {o['busbw_gbs']:.1f} | {t['ms']:.3f} | "
            f"{t['busbw_gbs']:.1f} | {o['busbw_gbs'] / t['busbw_gbs']:.2f} |"
        )
    open(sys.argv[2], "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
