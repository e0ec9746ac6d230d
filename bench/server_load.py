"""Load on an OpenAI-compatible server (ours or llama-server), standard library only.

Usage: python3 server_load.py BASE_URL --clients 1,8,32,64 [--requests 4] [--prompt-words 256]
       [--max-tokens 128] [--model NAME]

Each of N clients sends its requests one after another: `POST /v1/completions`, streamed,
greedy, `ignore_eos` (llama.cpp's field, which our server takes too) so every answer is
`--max-tokens` tokens. Every client's prompt is its own (the same texts for every server).
Prints one JSON line a client count: tokens/s over all clients (generated tokens over the
wall time), time to first token and time between tokens (median and p90, milliseconds),
requests and tokens counted, errors.
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def prompt_of(client, request, words):
    # different for every request (no prefix shared across clients), the same for every server
    vocab = ["river", "stone", "light", "paper", "garden", "window", "silver", "forest", "market", "winter"]
    return " ".join(vocab[(client * 7 + request * 3 + i * (client + 1)) % len(vocab)] for i in range(words))


def one_request(host, model, prompt, max_tokens):
    """Times of a streamed completion: (start, first token, token arrival times, tokens)."""
    conn = http.client.HTTPConnection(host, timeout=3600)
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"content-type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    arrivals, tokens, buf = [], None, b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                v = json.loads(data)
                if v.get("usage"):
                    tokens = v["usage"]["completion_tokens"]
                for c in v.get("choices") or []:
                    if c.get("text"):
                        arrivals.append(time.perf_counter())
    conn.close()
    return start, arrivals, tokens if tokens is not None else len(arrivals)


def run(base, model, clients, requests, words, max_tokens):
    host = urllib.parse.urlparse(base).netloc
    results, errors, lock = [], [], threading.Lock()

    def client(c):
        for q in range(requests):
            try:
                out = one_request(host, model, prompt_of(c, q, words), max_tokens)
                with lock:
                    results.append(out)
            except Exception as e:  # counted, not fatal: the figure says how many failed
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    wall = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall
    ttft = [(a[0] - s) * 1e3 for s, a, _ in results if a]
    gaps = [(b - a) * 1e3 for _, arr, _ in results for a, b in zip(arr, arr[1:])]
    tokens = sum(n for _, _, n in results)
    return {
        "clients": clients,
        "requests": len(results),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 2),
        "ttft_ms_median": percentile(ttft, 0.5),
        "ttft_ms_p90": percentile(ttft, 0.9),
        "itl_ms_median": statistics.median(gaps) if gaps else None,
        "itl_ms_p90": percentile(gaps, 0.9),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--clients", default="1,8,32,64")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--prompt-words", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--model", default="")
    args = ap.parse_args()
    if not args.model:
        # the server's own name for its model
        conn = http.client.HTTPConnection(urllib.parse.urlparse(args.base).netloc, timeout=60)
        conn.request("GET", "/v1/models")
        args.model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
    # one warm-up request (kernels load, a step is captured)
    run(args.base, args.model, 1, 1, args.prompt_words, 8)
    for n in [int(x) for x in args.clients.split(",")]:
        print(json.dumps(run(args.base, args.model, n, args.requests, args.prompt_words, args.max_tokens)), flush=True)


if __name__ == "__main__":
    main()
