"""Merges one run of .bench/run.sh into bench.json (every raw figure) and bench.md (the tables).
Usage: python3 report.py WORK_DIR COMMIT_FILE OUT_DIR"""
import datetime
import glob
import json
import math
import os
import struct
import sys

PEERS = ["rocm", "cuda", "torch"]
PEER_NAMES = {"rocm": "candle-rocm", "cuda": "Candle CUDA", "torch": "torch eager"}


def lines(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.startswith("{")]


def rate(row):
    """GB/s or TFLOP/s of a row (None where it failed)."""
    if "us" not in row:
        return None
    if "flops" in row:
        return row["flops"] / row["us"] / 1e6
    return row["bytes"] / row["us"] / 1e3


def fmt(v, digits=0):
    return "n/a" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def op_tables(work):
    passes = {}
    for p in (1, 2):
        rows = lines(f"{work}/ops-{p}.jsonl") + lines(f"{work}/torch-ops-{p}.jsonl")
        passes[p] = {(r["op"], r["dtype"], r["size"], r["device"]): r for r in rows}
    cases = []
    for r in lines(f"{work}/ops-1.jsonl"):
        key = (r["op"], r["dtype"], r["size"])
        if r["device"] == "rocm" and key not in [c[:3] for c in cases]:
            cases.append((*key, r["family"], "flops" in r))
    copies = [rate(r) for r in passes[1].values() if r["op"] == "copy" and r["size"] == "large"]
    ceiling = max([c for c in copies if c], default=None)
    large, small, flagged, host_ratios = [], [], [], []
    for op, dtype, size, family, is_flops in cases:
        got = {d: passes[1].get((op, dtype, size, d), {}) for d in PEERS}
        again = {d: passes[2].get((op, dtype, size, d), {}) for d in PEERS}
        noise = max(
            [abs(rate(got[d]) - rate(again[d])) / min(rate(got[d]), rate(again[d]))
             for d in PEERS if rate(got[d]) and rate(again[d])],
            default=None,
        )
        noise = fmt(None if noise is None else 100 * noise) + "%"
        # each peer's better pass: the host's noise only ever slows a run down
        best = {d: max([v for v in (rate(got[d]), rate(again[d])) if v], default=None)
                for d in PEERS}
        ours, cuda, tch = (best[d] for d in PEERS)
        errors = "; ".join(f"{PEER_NAMES[d]}: {got[d]['error']}" for d in PEERS if "error" in got[d])
        if size == "large":
            unit = "TFLOP/s" if is_flops else "GB/s"
            # matmul/conv: the ceiling is the faster vendor library (cuBLAS/cuDNN) of the peers
            top = max([v for v in (cuda, tch) if v], default=None) if is_flops else ceiling
            pct = ratio(ours, top)
            large.append(
                f"| {family} | {op} | {dtype} | {fmt(ours, 1 if is_flops else 0)} {unit} "
                f"| {fmt(None if pct is None else 100 * pct)}% | {fmt(cuda, 1 if is_flops else 0)} "
                f"| {fmt(tch, 1 if is_flops else 0)} | {fmt(ratio(ours, cuda), 2)} "
                f"| {fmt(ratio(ours, tch), 2)} | {noise} | {errors} |"
            )
            below = []
            if ours is not None and cuda is not None and ours < cuda:
                below.append(f"{ratio(ours, cuda):.2f}x Candle CUDA")
            if pct is not None and pct < 0.8:
                below.append(f"{100 * pct:.0f}% of the ceiling")
            if ours is None:
                below.append("failed")
            if below:
                flagged.append(f"- {op} {dtype} (memory-bound): " + ", ".join(below))
        else:
            us = {d: min([v for v in (got[d].get("us"), again[d].get("us")) if v], default=None)
                  for d in PEERS}
            host = {d: min([v for v in (got[d].get("host_us"), again[d].get("host_us")) if v],
                           default=None) for d in PEERS}
            host_ratios.append(ratio(host["rocm"], host["cuda"]))
            small.append(
                f"| {family} | {op} | {dtype} | {fmt(us['rocm'], 1)} | {fmt(us['cuda'], 1)} "
                f"| {fmt(us['torch'], 1)} | {fmt(ratio(us['cuda'], us['rocm']), 2)} "
                f"| {fmt(ratio(us['torch'], us['rocm']), 2)} | {fmt(host['rocm'], 2)} "
                f"| {fmt(host['cuda'], 2)} | {fmt(ratio(host['rocm'], host['cuda']), 2)} "
                f"| {noise} | {errors} |"
            )
            if us["rocm"] is not None and us["cuda"] is not None and us["rocm"] > us["cuda"]:
                flagged.append(
                    f"- {op} {dtype} (4 K elements): {us['rocm']:.1f} us per call against "
                    f"Candle CUDA's {us['cuda']:.1f}"
                )
    md = [
        "## Ops through Candle's API, memory-bound (inputs of 256 MiB; matmul and conv at full size)",
        "",
        f"Ceiling: the fastest device-to-device copy of the run, {fmt(ceiling)} GB/s (bytes read + "
        "written). For matmul and conv the % column is against the faster of Candle CUDA and torch "
        "(cuBLAS, cuDNN). Each figure is the peer's better pass of two; noise: the largest "
        "difference between the two passes among the three peers. Ratios are speed: above 1, "
        "candle-rocm is faster.",
        "",
        "| family | op | dtype | candle-rocm | % of ceiling | Candle CUDA | torch | vs Candle CUDA "
        "| vs torch | noise | errors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *large,
        "",
        "## Ops through Candle's API, launch-bound (4 K elements): microseconds per call",
        "",
        "Host work plus launch, per call, in a loop of calls (median over batches; the better "
        "pass of two). Ratios: the peer's time over ours; above 1, candle-rocm is faster. "
        "Host us: the host's time alone per call (queueing it and dropping its output, in "
        "batches of 128 calls timed without waiting for the device); where the loop's us is "
        "above it, the loop is bound by the device. host ours / Candle CUDA: the issue's "
        "target is at most 0.7.",
        "",
        "| family | op | dtype | candle-rocm us | Candle CUDA us | torch us | vs Candle CUDA "
        "| vs torch | candle-rocm host us | Candle CUDA host us | host ours / Candle CUDA "
        "| noise | errors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *small,
        "",
        host_summary(host_ratios),
    ]
    raw = [dict(r, **{"pass": p}) for p in (1, 2) for r in passes[p].values()]
    return md, flagged, raw, ceiling


def host_summary(ratios):
    """The launch-bound host-time ratios against the issue's 0.7 target, in one line."""
    r = sorted(x for x in ratios if x is not None)
    if not r:
        return "Host time: not measured."
    geo = math.exp(sum(math.log(x) for x in r) / len(r))
    within = sum(1 for x in r if x <= 0.7)
    return (f"Host time, ours / Candle CUDA over {len(r)} ops: geometric mean {geo:.2f}, "
            f"median {r[len(r) // 2]:.2f}, largest {r[-1]:.2f}; {within} of {len(r)} at or "
            "below 0.7.")


def read_f32(path):
    if not os.path.exists(path):
        return None
    data = open(path, "rb").read()
    return struct.unpack(f"<{len(data) // 4}f", data)


def memory_by_pid(work, name="mem.csv"):
    peak = {}
    for line in open(f"{work}/{name}") if os.path.exists(f"{work}/{name}") else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            peak[int(parts[0])] = max(peak.get(int(parts[0]), 0), int(parts[1]))
    return peak


def model_table(work):
    peaks = memory_by_pid(work)
    runs, md, checks = [], [], {}
    for p in (1, 2):
        for d in PEERS:
            r = lines(f"{work}/model-{d}-{p}.json")
            if not r:
                continue
            r = dict(r[-1], **{"pass": p})
            # the untimed run of the same peer, sampled by nvidia-smi
            pid_file = f"{work}/pid-{d}-mem"
            if os.path.exists(pid_file):
                r["process_peak_mib"] = peaks.get(int(open(pid_file).read().strip()))
            r["first_logits"] = read_f32(f"{work}/logits-{d}-{p}.f32")
            runs.append(r)
    if not runs:
        return ["## Model", "", "not run"], [], checks
    ref = next((r for r in runs if r["device"] == "cuda" and r["pass"] == 1), None)
    md += [
        f"## Model: {runs[0].get('model', 'llama')}",
        "",
        f"Prefill {runs[0]['prefill_tokens']} tokens (median of the timed runs, after a warm-up), "
        f"then {runs[0]['decode_tokens']} greedy tokens, the argmax read back every step. Same "
        "weights on every peer (seeded; torch loads the file the bench wrote). Process memory: "
        "the largest `nvidia-smi` sample (every 100 ms) of a third, untimed run of the peer, "
        "context included.",
        "",
        "| peer | pass | prefill tokens/s | decode tokens/s | process memory MiB | allocator peak MiB "
        "| tokens equal to Candle CUDA's | first-step logits: max abs diff to Candle CUDA |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        equal = diff = None
        if ref is not None:
            equal = 0
            for a, b in zip(r["tokens"], ref["tokens"]):
                if a != b:
                    break
                equal += 1
            if r["first_logits"] and ref["first_logits"]:
                diff = max(abs(a - b) for a, b in zip(r["first_logits"], ref["first_logits"]))
        alloc = r.get("pool_peak_bytes") or r.get("allocator_peak_bytes")
        name = PEER_NAMES[r["device"]] + (f" ({r['impl']})" if "impl" in r else "")
        md.append(
            f"| {name} | {r['pass']} | {r['prefill_tokens_per_s']:.0f} | {r['decode_tokens_per_s']:.1f} "
            f"| {fmt(r.get('process_peak_mib'))} | {fmt(None if alloc is None else alloc / 2**20)} "
            f"| {fmt(equal)} of {len(r['tokens'])} | {fmt(diff, 4)} |"
        )
        checks[f"{r['device']}-{r['pass']}"] = {"tokens_equal_to_cuda": equal, "logits_max_abs_diff": diff}
        if ref and r["first_logits"]:
            checks[f"{r['device']}-{r['pass']}"]["logits_max_abs"] = max(abs(v) for v in r["first_logits"])
    md += ["", *accuracy_table(work, runs, checks)]
    for r in runs:
        r.pop("first_logits", None)
    return md, runs, checks


GGUF_PEERS = {"rocm": "candle-rocm", "cuda": "Candle CUDA",
              "rocm-static": "candle-rocm, static llama, captured step",
              "rocm-static-f16": "candle-rocm, static llama, captured step, f16 KV cache",
              "llamacpp": "llama.cpp, flash attention off", "llamacpp-fa": "llama.cpp, flash attention on"}
# Where the decode rate of the Candle peers is taken: 128 tokens after a 512-token prefill; llama.cpp's
# decode row is the one at the same depth (llama-bench -d 512), its prefill row the one from an empty
# cache.
DECODE_DEPTH = 512


def llama_cpp_rates(path, flash):
    """(prefill tokens/s, decode tokens/s) from llama-bench's JSON output, flash attention on or off."""
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        return None, None
    rows = [r for r in rows if bool(r.get("flash_attn")) == flash]
    pp = next((r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0
               and r.get("n_depth", 0) == 0), None)
    tg = next((r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0
               and r.get("n_depth", DECODE_DEPTH) == DECODE_DEPTH), None)
    return pp, tg


def gguf_table(work):
    """The GGUF models: one row per shape x type x peer."""
    peaks = memory_by_pid(work, "mem-gguf.csv")
    md, raw = [], []
    for shape in ("1b", "8b", "30b-a3b"):
        for ty in ("q4_0", "q4k", "q6k", "q8_0"):
            for peer in GGUF_PEERS:
                path = f"{work}/gguf-{shape}-{ty}-{peer.removesuffix('-fa')}.json"
                if not os.path.exists(path):
                    continue
                if peer.startswith("llamacpp"):
                    pp, tg = llama_cpp_rates(path, peer.endswith("-fa"))
                    r = {"prefill_tokens_per_s": pp, "decode_tokens_per_s": tg}
                else:
                    got = lines(path)
                    r = got[-1] if got else {}
                pid_file = f"{work}/pid-gguf-{shape}-{ty}-{peer.removesuffix('-fa')}"
                if os.path.exists(pid_file):
                    r["process_peak_mib"] = peaks.get(int(open(pid_file).read().strip()))
                raw.append(dict(r, shape=shape, type=ty, peer=peer))
    batch_md, batch_raw = batch_table(work, peaks)
    if not raw:
        return ["## GGUF models", "", *(batch_md or ["not run"])], batch_raw
    md += [
        "## GGUF models (quantized_llama; the static llama with a captured decode step; llama.cpp's llama-bench)",
        "",
        "Llama shapes of 1B (hidden 2048, 16 layers, 32/8 heads, ffn 8192) and 8B (hidden 4096, "
        "32 layers, 32/8 heads, ffn 14336), vocabulary 49152 (SmolLM2's tokenizer), random blocks "
        "of one type for every matrix, the same file for every peer. Prefill 512 tokens, then 128 "
        "decoded at batch 1 (Candle: median of 3 after a warm-up; llama.cpp: llama-bench -p 512 "
        "-n 128 -d 0,512 -fa 0,1 -r 3 -ngl 99: its prefill from an empty cache, its decode after 512 "
        "tokens of context, as Candle's). The shape 30b-a3b is Qwen3-30B-A3B's (qwen3moe: hidden 2048, 48 layers, "
        "32/4 heads of 128, every feed-forward 8 of 128 experts of ffn 768, router weights in f32), run by "
        "candle-transformers' `quantized_qwen3_moe` with bf16 activations (Candle CUDA's MoE kernels take no other): one timed sequence after a warm-up "
        "one on the same cache (the model cannot clear it), so its prefill starts at depth 68 and its decode "
        "follows it. The static llama (`static_llama::StaticLlama::from_gguf`, same file) "
        "prefills in one pass and decodes by replaying one captured step, each token read back. "
        "Process memory: the largest nvidia-smi sample (every 0.5 s).",
        "",
        "| shape | type | peer | prefill tokens/s | decode tokens/s | process memory MiB "
        "| decode / Candle CUDA | decode / llama.cpp at its best |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in raw:
        same = {x["peer"]: x for x in raw if x["shape"] == r["shape"] and x["type"] == r["type"]}
        dec = r.get("decode_tokens_per_s")
        vs = lambda p: fmt(ratio(dec, same.get(p, {}).get("decode_tokens_per_s")), 2)
        best = max((same.get(p, {}).get("decode_tokens_per_s") or 0 for p in ("llamacpp", "llamacpp-fa")),
                   default=0) or None
        md.append(
            f"| {r['shape']} | {r['type']} | {GGUF_PEERS[r['peer']]} | {fmt(r.get('prefill_tokens_per_s'))} "
            f"| {fmt(dec, 1)} | {fmt(r.get('process_peak_mib'))} | {vs('cuda')} | {fmt(ratio(dec, best), 2)} |"
        )
    md += load_table(work, raw)
    md += batch_md
    prompt_md, prompt_raw = prompt_table(work)
    md += prompt_md
    return md, raw + batch_raw + prompt_raw


def prompt_table(work):
    """Longer prompts (GGUF_PROMPTS): the static llama's prefill against llama-bench's with flash
    attention, both from an empty cache."""
    md_rows, raw = [], []
    for path in sorted(glob.glob(f"{work}/gguf-*-rocm-prompt*.json")):
        name = os.path.basename(path)[len("gguf-"):-len(".json")]
        stem, p = name.rsplit("-rocm-prompt", 1)
        shape, ty = stem.rsplit("-", 1)
        ours = lines(path)
        ours = ours[-1].get("prefill_tokens_per_s") if ours else None
        theirs = None
        try:
            rows = json.load(open(f"{work}/gguf-{stem}-llamacpp-prompt{p}.json"))
            theirs = next((r["avg_ts"] for r in rows if r.get("n_prompt") == int(p) and r.get("n_gen", 0) == 0), None)
        except (OSError, ValueError):
            pass
        md_rows.append(f"| {shape} | {ty} | {p} | {fmt(ours)} | {fmt(theirs)} | {fmt(ratio(ours, theirs), 2)} |")
        raw.append({"shape": shape, "type": ty, "peer": f"prompt-{p}", "prefill_tokens_per_s": ours,
                    "llamacpp_fa_prefill_tokens_per_s": theirs})
    if not md_rows:
        return [], raw
    return [
        "",
        "### Longer prompts",
        "",
        "One prompt from an empty cache: the static llama (`--static --cache f16 --prompt P --decode 8`, "
        "median of 3 after a warm-up) against `llama-bench -p P -n 0 -fa 1 -r 3 -ngl 99`.",
        "",
        "| shape | type | prompt tokens | candle-rocm tokens/s | llama.cpp (fa on) tokens/s | ours / llama.cpp |",
        "|---|---|---:|---:|---:|---:|",
        *md_rows,
    ], raw


def llama_batched_rows(path):
    """llama-batched-bench's JSON lines (stdout, or mixed into its log)."""
    rows = []
    for p in (path, path.removesuffix(".jsonl") + ".log"):
        for line in open(p) if os.path.exists(p) else []:
            line = line.strip()
            if line.startswith("{") and '"speed_tg"' in line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def batch_table(work, peaks):
    """Several sequences decoding together: the static llama's batch of slots (f16 cache) against
    llama-batched-bench at the same batch sizes, prompt and decode lengths."""
    md_rows, raw = [], []
    pid_mem = lambda name: (peaks.get(int(open(f"{work}/pid-gguf-{name}").read().strip()))
                            if os.path.exists(f"{work}/pid-gguf-{name}") else None)
    for shape in ("1b", "8b"):
        for ty in ("q4_0", "q4k", "q6k", "q8_0"):
            ours = lines(f"{work}/gguf-{shape}-{ty}-rocm-batch.json")
            if not ours:
                continue
            ours = ours[-1]
            mem = pid_mem(f"{shape}-{ty}-rocm-batch")
            theirs = {fa: {r["pl"]: r for r in llama_batched_rows(
                f"{work}/gguf-{shape}-{ty}-llamacpp-batched-fa{fa}.jsonl")} for fa in ("off", "on")}
            their_mem = {fa: pid_mem(f"{shape}-{ty}-llamacpp-batched-fa{fa}") for fa in ("off", "on")}
            for b in ours.get("batches", []):
                n = b["batch"]
                off, on = theirs["off"].get(n, {}), theirs["on"].get(n, {})
                best = max(off.get("speed_tg") or 0, on.get("speed_tg") or 0) or None
                md_rows.append(
                    f"| {shape} | {ty} | {n} | {fmt(b['decode_tokens_per_s'], 1)} | {fmt(b['prefill_tokens_per_s'])} "
                    f"| {fmt(off.get('speed_tg'), 1)} | {fmt(on.get('speed_tg'), 1)} "
                    f"| {fmt(ratio(b['decode_tokens_per_s'], best), 2)} "
                    f"| {fmt(on.get('speed_pp'))} |"
                )
                raw.append(dict(b, shape=shape, type=ty, peer="rocm-batch",
                                llamacpp_tg_fa_off=off.get("speed_tg"), llamacpp_tg_fa_on=on.get("speed_tg"),
                                llamacpp_pp_fa_on=on.get("speed_pp")))
            raw.append({"shape": shape, "type": ty, "peer": "rocm-batch-memory", "process_peak_mib": mem,
                        "llamacpp_batched_fa_off_mib": their_mem["off"], "llamacpp_batched_fa_on_mib": their_mem["on"]})
            md_rows.append(
                f"| {shape} | {ty} | memory | process peak {fmt(mem)} MiB | | {fmt(their_mem['off'])} MiB "
                f"| {fmt(their_mem['on'])} MiB | {fmt(ratio(mem, their_mem['on']), 2)} (memory / llama.cpp's) | |"
            )
    if not md_rows:
        return [], raw
    return [
        "",
        "### Several sequences decoding together",
        "",
        "Each sequence's own prompt of 512 seeded tokens, then 128 tokens decoded by all the sequences "
        "together; aggregate decode tokens/s = sequences x 128 / time. candle-rocm: the static llama's "
        "batch of slots (`new_batch`, `prefill_slot` a prompt each, then `step_batch` captured once and "
        "replayed, the greedy tokens read back every step), f16 KV cache; median of 3 after a warm-up. "
        "llama.cpp: `llama-batched-bench -npp 512 -ntg 128 -npl <batches> -c <largest batch x 640> "
        "-b 2048 -ub 512 -ngl 99` (prompts not shared; its KV cache f16), flash attention off and on; "
        "its S_TG. Memory: the largest nvidia-smi sample of each process over all its batch sizes "
        "(the largest batch's cache); the ratio is against llama.cpp with flash attention on.",
        "",
        "| shape | type | sequences | candle-rocm decode tokens/s | candle-rocm prompt tokens/s "
        "| llama.cpp fa off | llama.cpp fa on | ours / llama.cpp at its best | llama.cpp prompt tokens/s (fa on) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        *md_rows,
    ], raw


def server_table(work):
    """The OpenAI-compatible servers under bench/server_load.py's load: ours and llama-server on
    the same file, with the static llama's single-sequence decode as the latency reference."""
    md_rows, raw = [], []
    for shape in ("1b", "8b", "30b-a3b"):
        for ty in ("q4_0", "q4k", "q6k", "q8_0"):
            runs = {peer: {r["clients"]: r for r in lines(f"{work}/server-{shape}-{ty}-{peer}.jsonl")}
                    for peer in ("rocm", "llamacpp")}
            if not runs["rocm"] and not runs["llamacpp"]:
                continue
            cli = lines(f"{work}/server-{shape}-{ty}-cli.json")
            cli_tps = cli[-1].get("decode_tokens_per_s") if cli else None
            cli_ms = 1e3 / cli_tps if cli_tps else None
            for n in sorted(set(runs["rocm"]) | set(runs["llamacpp"])):
                ours, theirs = runs["rocm"].get(n, {}), runs["llamacpp"].get(n, {})
                md_rows.append(
                    f"| {shape} | {ty} | {n} | {fmt(ours.get('tokens_per_s'), 1)} | {fmt(theirs.get('tokens_per_s'), 1)} "
                    f"| {fmt(ratio(ours.get('tokens_per_s'), theirs.get('tokens_per_s')), 2)} "
                    f"| {fmt(ours.get('ttft_ms_median'), 1)} / {fmt(theirs.get('ttft_ms_median'), 1)} "
                    f"| {fmt(ours.get('itl_ms_median'), 2)} / {fmt(theirs.get('itl_ms_median'), 2)} "
                    f"| {fmt(ours.get('itl_ms_p90'), 2)} / {fmt(theirs.get('itl_ms_p90'), 2)} "
                    f"| {ours.get('errors', '-')} / {theirs.get('errors', '-')} |"
                )
                raw.append({"shape": shape, "type": ty, "clients": n, "rocm": ours, "llamacpp": theirs})
            md_rows.append(
                f"| {shape} | {ty} | reference | the static llama's decode alone: {fmt(cli_tps, 1)} tokens/s, "
                f"{fmt(cli_ms, 2)} ms a token | | | | | | |"
            )
            raw.append({"shape": shape, "type": ty, "peer": "static-llama-decode", "decode_tokens_per_s": cli_tps})
    if not md_rows:
        return [], raw
    return [
        "",
        "## OpenAI-compatible servers (candle-rocm-llm serve, llama-server)",
        "",
        "The same GGUF for both; `--parallel` (`-np`) equal to the most clients, 1024 positions a "
        "sequence, llama-server with `-fa on -ngl 99`. bench/server_load.py: N clients at once, each "
        "sending 4 requests one after another, `POST /v1/completions` streamed, greedy, `ignore_eos`, "
        "128 tokens, a 256-word prompt of its own (the same texts for both servers). Tokens/s: all "
        "generated tokens over the wall time; TTFT: request to first token; ITL: between two tokens "
        "of a stream (median, p90). The reference: the static llama alone on the same file "
        "(`candle-rocm-bench gguf --static --cache f16 --prompt 300 --decode 128`).",
        "",
        "| shape | type | clients | ours tokens/s | llama-server tokens/s | ours / llama-server "
        "| TTFT ms median (ours / theirs) | ITL ms median | ITL ms p90 | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *md_rows,
    ], raw


def load_table(work, raw):
    """Each file onto the GPU: the static llama's second load in its process against llama.cpp's
    (bench/llama_load.cpp, also the second), and against the host-to-device copy ceiling."""
    rows = []
    for r in raw:
        if r["peer"] not in ("rocm-static", "rocm-static-f16") or r.get("first_load_s") is None:
            continue
        ll = lines(f"{work}/gguf-{r['shape']}-{r['type']}-llamacpp-load.json")
        ll = ll[-1] if ll else {}
        gb = (r.get("tensor_bytes") or 0) / 1e9
        ceiling = r.get("h2d_ceiling_gbps")
        rate = gb / r["load_s"] if r.get("load_s") else None
        rows.append(
            f"| {r['shape']} | {r['type']} | {GGUF_PEERS[r['peer']]} | {fmt(gb, 2)} | {fmt(r['load_s'], 2)} "
            f"| {fmt(r['first_load_s'], 2)} | {fmt(rate, 2)} | {fmt(ceiling, 1)} "
            f"| {fmt(100 * rate / ceiling if rate and ceiling else None, 0)} "
            f"| {fmt(ll.get('load_s'), 2)} | {fmt(ll.get('first_load_s'), 2)} "
            f"| {fmt(ratio(r['load_s'], ll.get('load_s')), 2)} |"
        )
    if not rows:
        return []
    return [
        "",
        "### Load",
        "",
        "From the call to the model on the device (synchronised), the file in the page cache: each "
        "peer loads it twice in one process and the second load is compared (the first also warms the "
        "driver; on candle-rocm it compiles the kernels the load needs). llama.cpp: "
        "`llama_model_load_from_file` with every layer on the GPU (bench/llama_load.cpp). Ceiling: "
        "1 GiB copied from candle-rocm's page-locked staging buffers with nothing written into them, "
        "in the same process. time / llama.cpp's: the issue's target is at most 1.2.",
        "",
        "| shape | type | peer | tensor GB | load s | first load s | GB/s | host-to-device ceiling GB/s "
        "| % of ceiling | llama.cpp load s | llama.cpp first load s | time / llama.cpp's |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


def accuracy_table(work, runs, checks):
    """Each peer's first-step logits (after the 512-token prefill) against Candle CUDA's f32 run."""
    f32 = {}
    for d in PEERS:
        r = lines(f"{work}/model-{d}-f32.json")
        if r:
            f32[d] = dict(r[-1], first_logits=read_f32(f"{work}/logits-{d}-f32.f32"))
    ref = f32.get("cuda")
    if not ref or not ref["first_logits"]:
        return ["(no f32 reference run)"]
    rl = ref["first_logits"]
    n = len(rl)
    mean = sum(rl) / n
    std = (sum((v - mean) ** 2 for v in rl) / n) ** 0.5
    top = max(range(n), key=lambda i: rl[i])
    md = [
        "### Outputs against the f32 reference",
        "",
        "The same weights in f32 on Candle CUDA are the reference: each run's logits after the "
        f"prefill against its logits (std {std:.2f} over the vocabulary; its top token {top}). "
        "Greedy tokens: the run's tokens equal to the f32 reference's, from the first.",
        "",
        "| peer | dtype | correlation | mean abs diff | max abs diff | same top token "
        "| greedy tokens equal to the f32 reference's |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    rows = [(d, "f32", f32[d]) for d in PEERS if d in f32]
    rows += [(r["device"], "bf16", r) for r in runs if r["pass"] == 1]
    for d, dtype, r in rows:
        lg = r.get("first_logits")
        if not lg or len(lg) != n:
            continue
        m = sum(lg) / n
        s = (sum((v - m) ** 2 for v in lg) / n) ** 0.5
        cov = sum((a - m) * (b - mean) for a, b in zip(lg, rl)) / n
        diffs = [abs(a - b) for a, b in zip(lg, rl)]
        equal = 0
        for a, b in zip(r["tokens"], ref["tokens"]):
            if a != b:
                break
            equal += 1
        row = {"correlation": cov / (s * std), "mean_abs_diff": sum(diffs) / n,
               "max_abs_diff": max(diffs), "same_top": max(range(n), key=lambda i: lg[i]) == top,
               "tokens_equal_to_f32_reference": equal}
        checks[f"{d}-{dtype}-vs-f32-reference"] = row
        md.append(
            f"| {PEER_NAMES[d]} | {dtype} | {row['correlation']:.6f} | {row['mean_abs_diff']:.4f} "
            f"| {row['max_abs_diff']:.4f} | {'yes' if row['same_top'] else 'no'} "
            f"| {equal} of {len(r['tokens'])} |"
        )
    return md


def torch_version():
    try:
        import torch

        return torch.__version__
    except ImportError:
        return "not installed"


def main():
    work, commit_file, out = sys.argv[1:4]
    gpu = open(f"{work}/gpu.txt").read().strip().split(", ")
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": gpu[0],
        "driver": gpu[1] if len(gpu) > 1 else None,
        "gpu_memory": gpu[2] if len(gpu) > 2 else None,
        "commit": open(commit_file).read().strip(),
        "torch": torch_version(),
    }
    ops_md, flagged, ops_raw, ceiling = op_tables(work)
    model_md, model_raw, checks = model_table(work)
    gguf_md, gguf_raw = gguf_table(work)
    server_md, server_raw = server_table(work)
    crate_md, crate_raw = [], {}
    for path in sorted(glob.glob(f"{work}/crate-*.md")):
        name = os.path.basename(path)[len("crate-"):-len(".md")]
        crate_md += [f"### {name} (the op crate's own API, no Candle in between)", "",
                     open(path).read().strip(), ""]
        crate_raw[name] = lines(f"{work}/crate-{name}.jsonl")
    md = [
        f"# candle-rocm benchmarks, {meta['date']}",
        "",
        f"{meta['gpu']} ({meta['gpu_memory']}), driver {meta['driver']}, commit {meta['commit']}, "
        f"torch {meta['torch']}. candle-rocm runs on the NVIDIA platform (HIP's NVIDIA path); "
        "Candle CUDA is candle-core 0.11.1's `cuda` + `cudnn` backend in the same process; torch "
        "eager in the same run. `cargo xtask bench-pack`, then `bash .bench/run.sh` on the GPU.",
        "",
        *model_md,
        "",
        *gguf_md,
        *server_md,
        "",
        *ops_md,
        "",
        "## Below Candle CUDA or below 80% of the ceiling",
        "",
        *(flagged or ["none"]),
        "",
        "## The op crates' own benchmarks",
        "",
        *(crate_md or ["not run"]),
    ]
    os.makedirs(out, exist_ok=True)
    with open(f"{out}/bench.md", "w") as f:
        f.write("\n".join(md) + "\n")
    with open(f"{out}/bench.json", "w") as f:
        json.dump({"meta": meta, "copy_ceiling_gbps": ceiling, "model": model_raw,
                   "model_checks": checks, "gguf": gguf_raw, "server": server_raw, "ops": ops_raw, "crate_benches": crate_raw}, f, indent=1)
    print("\n".join(md))


main()
