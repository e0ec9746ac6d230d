#!/usr/bin/env bash
# Runs every benchmark and its peers on this GPU; writes bench.json, bench.md and run.log
# under $OUT (default .bench/results).
# Usage: bash .bench/run.sh [--quick] [--skip-crates] [--skip-ops] [--skip-model] [--skip-gguf]
#        [--skip-decode] [--skip-server]
#        bash .bench/run.sh --build-llama-only   (llama.cpp's build alone: it can take minutes)
# The GGUF step takes the tokenizer from the packed tokenizer.gguf (SmolLM2's metadata alone).
# BENCH_CRATES (a glob, e.g. 'quantized') picks the op crates' benches.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# torch loads the CUDA libraries it bundles: python runs with the caller's library path
py_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CANDLE_ROCM_PLATFORM=${CANDLE_ROCM_PLATFORM:-nvidia}
export CANDLE_ROCM_CACHE_DIR=${CANDLE_ROCM_CACHE_DIR:-$(mktemp -d)/kernel-cache}
out=${OUT:-$here/results}; mkdir -p "$out"
work=$(mktemp -d)
quick=""; crates=1; ops=1; model=1; gguf=1; decode=1; server=1; build_llama_only=0
for a in "$@"; do
  case $a in
    --quick) quick=--quick;; --skip-crates) crates=0;; --skip-ops) ops=0;; --skip-model) model=0;; --skip-gguf) gguf=0;; --skip-decode) decode=0;; --skip-server) server=0;; --build-llama-only) build_llama_only=1; crates=0; ops=0; model=0; decode=0;;
  esac
done
[ -d "$here/bin" ] || tar -C "$here" -xJf "$here/binaries.tar.xz" || exit 1
exec > >(tee "$out/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$work/gpu.txt"
cat "$work/gpu.txt"
py=$here/py
python=("${py_env[@]}" python3)
# 1. the op crates' own benches (no Candle in between), each with its torch peer
if [ $crates = 1 ]; then
  for b in "$here"/bin/${BENCH_CRATES:-*}_bench; do
    name=$(basename "$b"); echo "== $name"
    "$b" > "$work/crate-$name.jsonl" &&
      "${python[@]}" "$py/torch_${name%_bench}.py" "$work/crate-$name.jsonl" "$work/crate-$name.md" ||
      echo "FAILED: $name"
  done
fi
# 2. Candle ops on Device::Rocm and Device::Cuda (one process), then torch; twice, for noise
for pass in 1 2; do
  [ $ops = 1 ] || break
  echo "== Candle ops, pass $pass"
  "$here/bin/candle-rocm-bench" ops $quick > "$work/ops-$pass.jsonl" || echo "FAILED: Candle ops"
  "${python[@]}" "$py/torch_candle_ops.py" "$work/ops-$pass.jsonl" "$work/torch-ops-$pass.jsonl" $quick ||
    echo "FAILED: torch ops"
done
# 3. the llama model, one process per peer, each twice; then once more per peer with
# nvidia-smi sampling its device memory (apart from the timed runs: a query can stall them)
if [ $model = 1 ]; then
  "$here/bin/candle-rocm-bench" model --save-weights "$work/llama.safetensors" \
    --save-config "$work/llama.json" --repeats 5 --device none || echo "FAILED: writing the weights"
  for pass in 1 2 mem; do
    [ $pass = mem ] && { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
      -lms 100 > "$work/mem.csv" & smi=$!; }
    for dev in rocm cuda; do
      echo "== model on $dev, pass $pass"
      "$here/bin/candle-rocm-bench" model --device $dev --repeats 5 \
        --logits "$work/logits-$dev-$pass.f32" > "$work/model-$dev-$pass.json" &
      pid=$!; wait $pid || echo "FAILED: model on $dev"; echo $pid > "$work/pid-$dev-$pass"
    done
    echo "== model on torch, pass $pass"
    "${python[@]}" "$py/torch_llama.py" "$work/llama.safetensors" "$work/llama.json" \
      "$work/model-torch-$pass.json" "$work/logits-torch-$pass.f32" &
    pid=$!; wait $pid || echo "FAILED: model on torch"; echo $pid > "$work/pid-torch-$pass"
  done
  kill $smi
  # the reference: the same model in f32 on each peer
  for dev in rocm cuda; do
    echo "== model on $dev, f32"
    "$here/bin/candle-rocm-bench" model --device $dev --dtype f32 --repeats 1 \
      --logits "$work/logits-$dev-f32.f32" > "$work/model-$dev-f32.json" || echo "FAILED: f32 on $dev"
  done
  echo "== model on torch, f32"
  "${python[@]}" "$py/torch_llama.py" "$work/llama.safetensors" "$work/llama.json" \
    "$work/model-torch-f32.json" "$work/logits-torch-f32.f32" --f32 || echo "FAILED: f32 on torch"
fi
# 3b. the host path layer by layer, and decode with and without a captured step (twice each)
if [ $decode = 1 ]; then
  for pass in 1 2; do
    echo "== launch path, pass $pass"
    "$here/bin/candle-rocm-bench" launch > "$work/launch-$pass.jsonl" || echo "FAILED: launch"
  done
  for dev in rocm cuda; do
    echo "== decode on $dev"
    "$here/bin/candle-rocm-bench" decode --device $dev --passes 2 > "$work/decode-$dev.jsonl" ||
      echo "FAILED: decode on $dev"
  done
  "${python[@]}" "$py/report_decode.py" "$out/decode.md" "$work"/launch-*.jsonl -- "$work"/decode-*.jsonl ||
    echo "FAILED: the decode report"
fi
# 4. GGUF llama models of 1B and 8B shapes (random blocks, SmolLM2's tokenizer) in Q4_0, Q4_K,
# Q6_K and Q8_0 (GGUF_SHAPES and GGUF_TYPES pick some; GGUF_SHAPES=30b-a3b: the Qwen3-30B-A3B
# shaped mixture of experts, not run by default): candle-rocm, Candle CUDA and llama.cpp
# (built here for this GPU from the packed source; flash attention off and on) on the same files;
# device memory sampled by nvidia-smi every 0.5 s for all three.
if [ $gguf = 1 ] || [ $server = 1 ]; then
  # the tokenizer's metadata alone, packed; else from the SmolLM2 GGUF's halves
  if [ -f "$here/tokenizer.gguf" ]; then tok="$here/tokenizer.gguf"
  else tok=$(bash "$here/join-gguf.sh" "$here") || { echo "FAILED: the SmolLM2 GGUF"; gguf=0; server=0; }; fi
fi
if [ $gguf = 1 ] || [ $server = 1 ]; then
  # built once beside the pack (kept between runs on the same machine)
  build="$here/../.llama-build"
  bench="$build/bin/llama-bench"
  if [ ! -x "$bench" ]; then
    echo "== building llama.cpp's llama-bench ($(cat "$here/LLAMA_CPP"))"
    # the sdist leaves out the generated flash-attention instances: llama.cpp's own generator
    # writes them
    rm -rf "$work/llama.cpp" "$build" && tar -C "$work" -xJf "$here/llama.cpp.tar.xz" &&
      (cd "$work/llama.cpp/ggml/src/ggml-cuda/template-instances" && python3 generate_cu_files.py) &&
      cmake -S "$work/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_APP=OFF > "$work/llama-cmake.log" 2>&1 &&
      cmake --build "$build" --target llama-bench llama-batched-bench llama-server -j "$(nproc)" > "$work/llama-build.log" 2>&1 ||
      { echo "FAILED: building llama.cpp"; tail -20 "$work"/llama-*.log; }
  fi
  # its load timer (bench/llama_load.cpp) against the libraries llama-bench was built with
  loader="$build/bin/llama-load"
  if [ -x "$bench" ] && [ ! -x "$loader" ]; then
    [ -d "$work/llama.cpp" ] || tar -C "$work" -xJf "$here/llama.cpp.tar.xz"
    c++ -O2 -std=c++17 "$here/py/llama_load.cpp" -I"$work/llama.cpp/include" -I"$work/llama.cpp/ggml/include" \
      -L"$build/bin" -L"$build/src" -L"$build/ggml/src" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$loader" ||
      echo "FAILED: building llama-load"
  fi
  [ -x "$bench" ] || bench=""
  [ "$build_llama_only" = 1 ] && exit 0
fi
if [ $gguf = 1 ]; then
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 500 > "$work/mem-gguf.csv" &
  smi=$!
  # the files' stated context: 4096, or room for the longest of GGUF_PROMPTS and its decode
  context=4096
  for p in ${GGUF_PROMPTS:-}; do [ $((p + 256)) -gt $context ] && context=$((p + 256)); done
  for shape in ${GGUF_SHAPES:-1b 8b}; do
    for ty in ${GGUF_TYPES:-q4_0 q4k q6k q8_0}; do
      f="$work/llama-$shape-$ty.gguf"
      "$here/bin/candle-rocm-bench" gguf-write --shape $shape --type $ty --context $context --tokenizer-from "$tok" --out "$f" ||
        { echo "FAILED: writing $f"; continue; }
      # quantized_llama (quantized_qwen3_moe for the experts' shape) on each backend; on ROCm
      # also the static llama with a captured step, its KV cache in f32 and in f16 (llama.cpp's
      # default)
      peers="rocm cuda rocm-static rocm-static-f16"
      # GGUF_BATCHES (e.g. 1,4,16): also the static llama's batch of sequences (f16 cache, as
      # llama.cpp's) beside llama-batched-bench at the same batch sizes
      [ -n "${GGUF_BATCHES:-}" ] && peers="$peers rocm-batch"
      # GGUF_PEERS picks some of them (llama.cpp's runs are kept)
      peers=${GGUF_PEERS:-$peers}
      # quantized_qwen3_moe with bf16 activations (Candle CUDA's MoE kernels take no other) and
      # the static model's captured step (f16 cache, as llama.cpp's)
      moe=(); case $shape in *-a3b) peers=${GGUF_PEERS:-"rocm cuda rocm-static-f16"}; moe=(--dtype bf16);; esac
      for peer in $peers; do
        echo "== GGUF $shape $ty on $peer"
        args=(--device "${peer%%-*}")
        case $peer in
          rocm-static) args+=(--static);;
          rocm-static-f16) args+=(--static --cache f16);;
          rocm-batch) args+=(--static --cache f16 --batches "$GGUF_BATCHES");;
        esac
        "$here/bin/candle-rocm-bench" gguf "${args[@]}" "${moe[@]}" --file "$f" > "$work/gguf-$shape-$ty-$peer.json" &
        pid=$!; wait $pid || echo "FAILED: GGUF $shape $ty on $peer"; echo $pid > "$work/pid-gguf-$shape-$ty-$peer"
      done
      if [ -n "$bench" ]; then
        echo "== GGUF $shape $ty on llama.cpp"
        "$bench" -m "$f" -p 512 -n 128 -d 0,512 -r 3 -ngl 99 -fa 0,1 -o json > "$work/gguf-$shape-$ty-llamacpp.json" 2> "$work/gguf-$shape-$ty-llamacpp.log" &
        pid=$!; wait $pid || echo "FAILED: GGUF $shape $ty on llama.cpp"; echo $pid > "$work/pid-gguf-$shape-$ty-llamacpp"
        [ -x "$loader" ] && { "$loader" "$f" > "$work/gguf-$shape-$ty-llamacpp-load.json" ||
          echo "FAILED: llama.cpp's load of $f"; }
        batched="$build/bin/llama-batched-bench"
        if [ -n "${GGUF_BATCHES:-}" ] && [ -x "$batched" ]; then
          # prompts not shared, each sequence 512 + 128 positions of a cache for all of them
          most=$(echo "$GGUF_BATCHES" | tr ',' '\n' | sort -n | tail -1)
          for fa in off on; do
            echo "== GGUF $shape $ty on llama-batched-bench (flash attention $fa)"
            "$batched" -m "$f" -c $((most * 640)) -b 2048 -ub 512 -npp 512 -ntg 128 -npl "$GGUF_BATCHES" \
              -ngl 99 -fa $fa --output-format jsonl > "$work/gguf-$shape-$ty-llamacpp-batched-fa$fa.jsonl" \
              2> "$work/gguf-$shape-$ty-llamacpp-batched-fa$fa.log" &
            pid=$!; wait $pid || echo "FAILED: GGUF $shape $ty on llama-batched-bench"
            echo $pid > "$work/pid-gguf-$shape-$ty-llamacpp-batched-fa$fa"
          done
        fi
      fi
      # GGUF_PROMPTS (e.g. 4096): longer prompts, the static llama (f16 cache) against llama-bench
      # with flash attention, its prompt rate from an empty cache
      for p in ${GGUF_PROMPTS:-}; do
        echo "== GGUF $shape $ty, a prompt of $p tokens"
        "$here/bin/candle-rocm-bench" gguf --device rocm --static --cache f16 --prompt "$p" --decode 8 "${moe[@]}" \
          --file "$f" > "$work/gguf-$shape-$ty-rocm-prompt$p.json" || echo "FAILED: a prompt of $p on rocm"
        [ -n "$bench" ] && { "$bench" -m "$f" -p "$p" -n 0 -r 3 -ngl 99 -fa 1 -o json \
          > "$work/gguf-$shape-$ty-llamacpp-prompt$p.json" 2> "$work/gguf-$shape-$ty-llamacpp-prompt$p.log" ||
          echo "FAILED: a prompt of $p on llama.cpp"; }
      done
      # GGUF_PROFILE=1: ncu's time of each kernel of the static model's decode steps, run eagerly
      # (a captured step replays the same kernels): a prompt of 8, then 3 steps; the last step
      # summed by kernel (bench/ncu_step.py)
      if [ -n "${GGUF_PROFILE:-}" ] && command -v ncu > /dev/null; then
        echo "== GGUF $shape $ty, ncu kernel times of a decode step"
        ncu --clock-control none --metrics gpu__time_duration.sum --csv \
          "$here/bin/candle-rocm-bench" gguf --device rocm --static --profile --prompt 8 --decode 3 \
          "${moe[@]}" --file "$f" > "$work/ncu-$shape-$ty.csv" 2> "$work/ncu-$shape-$ty.log" &&
          "${python[@]}" "$py/ncu_step.py" "$work/ncu-$shape-$ty.csv" > "$out/ncu-step-$shape-$ty.md" ||
          echo "FAILED: ncu on $shape $ty"
      fi
      rm -f "$f"
    done
  done
  kill $smi
fi
# 5. the OpenAI-compatible servers on the same GGUF (SERVER_SHAPES / SERVER_TYPES, default 8b
# q4k): `candle-rocm-llm serve` and llama-server (flash attention on), --parallel equal to the
# most clients; bench/server_load.py drives each with the same prompts (N clients, 4 streamed
# greedy completions of 128 tokens each, 256-word prompts). The static llama's single-sequence
# decode on the same file (f16 cache, as the server's) is the 1-client latency's reference.
if [ $server = 1 ]; then
  clients=${SERVER_CLIENTS:-1,8,32,64}
  most=$(echo "$clients" | tr ',' '\n' | sort -n | tail -1)
  healthy() {  # waits until GET /health answers 200 (at most 10 minutes, while the server runs)
    for _ in $(seq 600); do
      kill -0 "$2" 2>/dev/null || return 1
      "${python[@]}" -c "import sys, urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=5)" \
        2>/dev/null && return 0
      sleep 1
    done
    return 1
  }
  for shape in ${SERVER_SHAPES:-8b}; do
    for ty in ${SERVER_TYPES:-q4k}; do
      f="$work/server-$shape-$ty.gguf"
      "$here/bin/candle-rocm-bench" gguf-write --shape $shape --type $ty --tokenizer-from "$tok" --out "$f" ||
        { echo "FAILED: writing $f"; continue; }
      echo "== server $shape $ty: the static llama's decode (reference)"
      "$here/bin/candle-rocm-bench" gguf --device rocm --static --cache f16 --prompt 300 --decode 128 --file "$f" \
        > "$work/server-$shape-$ty-cli.json" || echo "FAILED: the static llama on $f"
      for peer in rocm llamacpp; do
        port=$((18080 + RANDOM % 1000))
        case $peer in
          rocm) "$here/bin/candle-rocm-llm" serve --model "$f" --port $port --parallel "$most" --ctx 1024 \
                  --alias bench > "$work/server-$shape-$ty-$peer.log" 2>&1 & ;;
          llamacpp) [ -x "$build/bin/llama-server" ] || { echo "FAILED: no llama-server"; continue; }
                  "$build/bin/llama-server" -m "$f" --port $port -np "$most" -c $((most * 1024)) -ngl 99 -fa on \
                    --alias bench > "$work/server-$shape-$ty-$peer.log" 2>&1 & ;;
        esac
        srv=$!
        echo "== server $shape $ty on $peer (port $port)"
        if healthy $port $srv; then
          "${python[@]}" "$py/server_load.py" "http://127.0.0.1:$port" --clients "$clients" --requests 4 \
            --prompt-words 256 --max-tokens 128 > "$work/server-$shape-$ty-$peer.jsonl" ||
            echo "FAILED: the load on $peer"
        else
          echo "FAILED: the $peer server did not come up"; tail -20 "$work/server-$shape-$ty-$peer.log"
        fi
        kill $srv 2>/dev/null; wait $srv
      done
      rm -f "$f"
    done
  done
fi
# the raw figures travel back too, so the report can be redone anywhere
tar -C "$work" -cJf "$out/raw.tar.xz" --exclude=llama.safetensors .
"${python[@]}" "$py/report.py" "$work" "$here/COMMIT" "$out"
