#!/usr/bin/env bash
# Runs the packed GPU suite: every GPU test binary (built with the gpu-tests features), then
# the demo.
# Usage: bash .gpu/run.sh [--wave64 | --amd-shim] [--sanitize memcheck|racecheck|synccheck]
#   --wave64:   every kernel with emulated 64-lane wavefronts (compat.h's third target: CDNA's
#               wave64 semantics on two 32-lane warps; slow, for correctness only).
#   --amd-shim: the amd platform's host code, on the HIP shim (shim/: libamdhip64 and libhiprtc
#               over the CUDA driver and NVRTC). It presents an MI300X (gfx942, 64-lane
#               wavefronts, emulated); CANDLE_ROCM_SHIM_ARCH=gfx1100 presents a wave32 RDNA3.
#               cuBLAS stands in for rocBLAS, NCCL for RCCL (the shim's librccl.so), MIOpen is off.
#        bash .gpu/run.sh --multi-gpu   (a machine with two or more GPUs: the collectives' suite, the
#               tensor-parallel llama's check, the all-reduce benchmark against torch.distributed and
#               the tensor-parallel llama's throughput; results under $OUT)
# GPU_TESTS (a glob over tests/, default all) picks test binaries, e.g. 'rocm-indexing-*';
# with it set the demo and the LLM CLI are left out (GPU_LLM_CLI=1 keeps the CLI).
# GPU_TEST_TIMEOUT (seconds, default 900) bounds each binary, so a kernel that hangs fails its
# binary instead of the run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CANDLE_ROCM_PLATFORM=${CANDLE_ROCM_PLATFORM:-nvidia}
export CANDLE_ROCM_CACHE_DIR=${CANDLE_ROCM_CACHE_DIR:-$(mktemp -d)/kernel-cache}
# The binaries (tests, model demo) travel compressed; unpacked once, here.
[ -d "$here/tests" ] || tar -C "$here" -xJf "$here/binaries.tar.xz" || exit 1
wrap=(timeout "${GPU_TEST_TIMEOUT:-900}")
# NCCL for the collectives: the nvidia-nccl-cu13 wheel's library, where python has it.
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$nccl_lib" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_lib
# NVLink multicast stays off (a shared machine's requirement), also for every child process.
export NCCL_NVLS_ENABLE=0
multi_gpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --multi-gpu) multi_gpu=1; shift ;;
    --wave64) export CANDLE_ROCM_WAVE64_EMULATION=1; shift ;;
    --amd-shim)
      [ -f "$here/shim/lib/libamdhip64.so" ] || { echo "no HIP shim in $here/shim/lib" >&2; exit 2; }
      export ROCM_PATH="$here/shim" CANDLE_ROCM_PLATFORM=amd CANDLE_ROCM_HIP_ON_CUDA=1
      shift ;;
    --sanitize)
      # API errors are left out: the suite provokes some on purpose (missing kernel, out of memory).
      wrap+=(compute-sanitizer --tool "${2:-memcheck}" --report-api-errors no --error-exitcode 99)
      shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
passed=0; failed=0
# The f16 all-MiniLM-L6-v2 of the demo travels apart too (.gpu-gguf-minilm): beside the pack, or
# where an earlier call put it.
side=${GPU_SIDE:-$HOME/gpu-side}
for d in "$here/../.gpu-gguf-minilm" "$side"; do
  [ -d "$here/models/all-MiniLM-L6-v2" ] || [ ! -d "$d/all-MiniLM-L6-v2" ] || cp -r "$d/all-MiniLM-L6-v2" "$here/models/"
done
# The SmolLM2 GGUF comes in two halves carried apart from the pack; joined once, for the KL
# divergence test (e2e kld) and the demo.
if gguf=$(bash "$here/join-gguf.sh" "$here"); then export CANDLE_ROCM_SMOLLM2_GGUF=$gguf; fi
if [ $multi_gpu = 1 ]; then
  out=${OUT:-$here/results}; mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpus.txt"
  echo "== rocm-ccl multi_gpu"
  if "${wrap[@]}" "$here/multi/rocm-ccl-multi_gpu" --test-threads=1 --nocapture 2>&1 | tee "$out/multi_gpu.log" | tail -40 && grep -q "test result: ok" "$out/multi_gpu.log"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  echo "== tensor-parallel llama check"
  if "${wrap[@]}" "$here/bin/candle-rocm-tp" check 2>&1 | tee "$out/tp-check.log" | tail -8 && grep -q '"passed":true' "$out/tp-check.log"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  echo "== all-reduce bandwidth"
  "${wrap[@]}" "$here/multi/ccl_bench" > "$out/ccl_bench.jsonl" && python3 "$here/multi/torch_ccl.py" "$out/ccl_bench.jsonl" "$out/ccl.md" || echo "FAILED: ccl bench"
  echo "== tensor-parallel llama throughput"
  "${wrap[@]}" "$here/bin/candle-rocm-tp" bench --shape "${TP_SHAPE:-8b}" > "$out/tp-bench.jsonl" || echo "FAILED: tp bench"
  cut -c1-600 "$out/tp-bench.jsonl"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi
for t in "$here"/tests/${GPU_TESTS:-*}; do
  echo "== $(basename "$t")"
  out=$("${wrap[@]}" "$t" --test-threads=1 --nocapture 2>&1); rc=$?
  echo "$out"
  p=$(echo "$out" | sed -n 's/^test result: .*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' | awk '{s+=$1} END {print s+0}')
  f=$(echo "$out" | sed -n 's/^test result: .*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' | awk '{s+=$1} END {print s+0}')
  # Under a sanitizer, a binary that never touches the GPU makes the tool exit non-zero.
  if [ "$rc" -eq 124 ]; then echo "TIMED OUT after ${GPU_TEST_TIMEOUT:-900} s"; fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && ! echo "$out" | grep -q "terminated before first instrumented API call"; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
done
# The demo twice on a fresh kernel cache: a cold compile, then a load from disk.
demo_cache=$(mktemp -d)
[ -n "${GPU_TESTS:-}" ] && passes="" || passes="cold warm"
for pass in $passes; do
  echo "== demo ($pass kernel cache)"
  if CANDLE_ROCM_CACHE_DIR=$demo_cache "$here/xtask" demo; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
# The LLM runtime as a user runs it: the CLI (a prompt, then a chat turn on stdin), the
# README's chat program and the server on the SmolLM2 GGUF; each must answer and exit cleanly.
llm_cli=1
[ -n "${GPU_TESTS:-}" ] && [ -z "${GPU_LLM_CLI:-}" ] && llm_cli=0
[ -n "${CANDLE_ROCM_SMOLLM2_GGUF:-}" ] || llm_cli=0
if [ $llm_cli = 1 ]; then
  for run in generate chat example; do
    echo "== candle-rocm-llm $run"
    case $run in
      generate) got=$("${wrap[@]}" "$here/bin/candle-rocm-llm" generate --model "$CANDLE_ROCM_SMOLLM2_GGUF" \
                  --prompt "What is the capital of France?" --max-tokens 24 2>"$here/llm-$run.err");;
      chat) got=$(echo "Name three colours." | "${wrap[@]}" "$here/bin/candle-rocm-llm" chat \
              --model "$CANDLE_ROCM_SMOLLM2_GGUF" --max-tokens 24 2>"$here/llm-$run.err");;
      example) got=$(echo "Name three colours." | "${wrap[@]}" "$here/bin/chat" "$CANDLE_ROCM_SMOLLM2_GGUF" \
                 2>"$here/llm-$run.err");;
    esac
    rc=$?
    echo "$got"; tail -3 "$here/llm-$run.err"
    if [ $rc -eq 0 ] && [ -n "$(echo "$got" | tr -d '[:space:]')" ]; then passed=$((passed + 1)); else
      echo "FAILED: candle-rocm-llm $run (exit $rc)"; failed=$((failed + 1)); fi
  done
  # The server as users drive it: OpenAI's Python client (its wheels in server/, installed once)
  # runs tests/server_client.py's checks against `candle-rocm-llm serve` on the GPU (64
  # concurrent clients among them), by default (a sequence's rounding depends on its batch:
  # "batched") and with --deterministic; SIGTERM must then end the server with status 0.
  client=$here/server/python
  [ -f "$client/COMPLETE" ] || { python3 -m pip install --quiet --disable-pip-version-check --no-index \
    --find-links "$here/server/wheels" --target "$client" openai && touch "$client/COMPLETE"; }
  for mode in batched deterministic; do
    echo "== candle-rocm-llm serve ($mode), driven by OpenAI's client"
    flags=(); [ $mode = deterministic ] && flags=(--deterministic)
    "$here/bin/candle-rocm-llm" serve --device rocm --port 0 --parallel 4 --ctx 512 --api-key test-key \
      --alias smollm2 "${flags[@]}" --model "$CANDLE_ROCM_SMOLLM2_GGUF" 2> "$here/llm-server-$mode.err" &
    srv=$!; addr=""; ready=0
    for _ in $(seq 300); do
      kill -0 $srv 2>/dev/null || break
      [ -n "$addr" ] || addr=$(sed -n 's|^listening on http://||p' "$here/llm-server-$mode.err" | head -1)
      [ -n "$addr" ] && python3 -c "import urllib.request as u; u.urlopen('http://$addr/health', timeout=5)" 2>/dev/null &&
        { ready=1; break; }
      sleep 1
    done
    rc=1
    if [ $ready = 1 ] && [ -f "$client/COMPLETE" ]; then
      PYTHONPATH=$client timeout "${GPU_TEST_TIMEOUT:-900}" python3 "$here/server/server_client.py" "http://$addr" \
        smollm2 test-key 512 $mode > "$here/llm-server-$mode.out" 2>&1; rc=$?
    fi
    cat "$here/llm-server-$mode.out" 2>/dev/null
    kill -TERM $srv 2>/dev/null; wait $srv; stopped=$?
    tail -3 "$here/llm-server-$mode.err"
    if [ $rc -eq 0 ] && grep -q " passed, 0 failed" "$here/llm-server-$mode.out" && [ $stopped -eq 0 ]; then
      passed=$((passed + 1)); else
      echo "FAILED: candle-rocm-llm serve $mode (ready $ready, client $rc, server exit $stopped)"; failed=$((failed + 1)); fi
  done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
