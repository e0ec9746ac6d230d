"""The launch-path and decode tables of issue "launch in microseconds, graphs" from the JSON
lines of `candle-rocm-bench launch` and `candle-rocm-bench decode` (one or more files of each).
Usage: python3 report_decode.py OUT.md LAUNCH.jsonl... -- DECODE.jsonl..."""
import json
import statistics
import sys


def lines(paths):
    for p in paths:
        for line in open(p):
            if line.startswith("{"):
                yield json.loads(line)


def main():
    out = sys.argv[1]
    rest = sys.argv[2:]
    cut = rest.index("--")
    launch, decode = list(lines(rest[:cut])), list(lines(rest[cut + 1:]))
    md = ["## Host time per call, layer by layer (exp and add, f32, 4 K elements)", "",
          "Wall time per call in loops of 2000 calls, median of 9 batches; each run's figure, "
          "runs in order. Candle CUDA is candle-core 0.11.1's `cuda` backend in the same process.", "",
          "| device | layer | us per call (each run) | median |", "|---|---|---|---:|"]
    by_layer = {}
    for r in launch:
        by_layer.setdefault((r["device"], r["layer"]), []).append(r["us_per_call"])
    for (dev, layer), v in by_layer.items():
        md.append(f"| {dev} | {layer} | {', '.join(f'{x:.2f}' for x in v)} | {statistics.median(v):.2f} |")
    cuda = {l.split(" on ")[0]: statistics.median(v) for (d, l), v in by_layer.items() if d == "cuda"}
    md += ["", "| op | candle-rocm us | Candle CUDA us | ours / Candle CUDA (target <= 0.7) |", "|---|---:|---:|---:|"]
    for (dev, layer), v in by_layer.items():
        if dev == "rocm" and layer.startswith("Candle: "):
            key = layer.split(" on ")[0]
            if key in cuda:
                ours = statistics.median(v)
                md.append(f"| {key[len('Candle: '):]} | {ours:.2f} | {cuda[key]:.2f} | {ours / cuda[key]:.2f} |")
    md += ["", "## Decode, llama 1.1B shape, bf16 (128 greedy tokens, each read back)", "",
           "| device | model | pass | decode tokens/s | device ms per replayed step | tokens equal to the reference, from the first |",
           "|---|---|---:|---:|---:|---|"]
    for r in decode:
        variant = r.get("variant", "candle-transformers llama")
        replay = r.get("replay_ms_per_step")
        eq = r.get("tokens_equal_to_reference_from_first")
        md.append(f"| {r['device']} | {variant} | {r.get('pass', '')} | {r['decode_tokens_per_s']:.1f} | "
                  f"{'' if replay is None else f'{replay:.3f}'} | {'' if eq is None else eq} |")
    open(out, "w").write("\n".join(md) + "\n")
    print("\n".join(md))


main()
