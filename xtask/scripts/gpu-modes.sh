#!/usr/bin/env bash
# Runs chains of the packed GPU suite side by side (one device call, several modes): each
# argument is "MODE:GLOB" (MODE normal, wave64 or amd-shim; MODE.N for another chain of that
# mode beside it) and a chain's globs run one after another through run.sh; a log a run under
# $OUT/logs, a line a run on stdout. CHAIN_TIMEOUT (seconds, default 560) bounds each run.
# Usage: bash .gpu/modes.sh 'normal:rocm-*' 'wave64:rocm-reduce-*' 'amd-shim:llm-*'
set -u -f
here=$(cd "$(dirname "$0")" && pwd)
# unpacked and the GGUF joined once, before the chains start side by side
[ -d "$here/tests" ] || tar -C "$here" -xJf "$here/binaries.tar.xz" || exit 1
bash "$here/join-gguf.sh" "$here" > /dev/null || echo "the SmolLM2 GGUF is not there: its tests will fail"
mkdir -p "$OUT/logs"
declare -A chains
for a in "$@"; do m=${a%%:*}; chains[$m]+="${a#*:} "; done
pids=()
for m in "${!chains[@]}"; do
  (
    mode=${m%%.*}; flag=""; [ "$mode" = normal ] || flag="--$mode"
    for g in ${chains[$m]}; do
      name=$(echo "$m-$g" | tr -c 'a-zA-Z0-9-\n' '_')
      GPU_TESTS="$g" timeout "${CHAIN_TIMEOUT:-560}" bash "$here/run.sh" $flag > "$OUT/logs/$name.log" 2>&1
      echo "$m $g rc=$? $(tail -1 "$OUT/logs/$name.log")"
    done
  ) &
  pids+=($!)
done
wait "${pids[@]}"
