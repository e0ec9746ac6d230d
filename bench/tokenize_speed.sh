#!/usr/bin/env bash
# Tokenization speed against llama.cpp's llama-tokenize, on this machine's CPU, one run:
# the same 1 MB text (the first 1,000,000 bytes of every Markdown file of the pinned
# llama-cpp-python sdist's vendor/llama.cpp, in path order), the same GGUF, each command
# whole (load the vocabulary, tokenize, print the ids), the median of 5 runs after a warm-up,
# on all the machine's cores and on one;
# the ids of the two must be equal.
#
# usage: bench/tokenize_speed.sh LLAMA_CPP_DIR LLAMA_TOKENIZE CANDLE_ROCM_LLM MODEL.gguf
set -euo pipefail
src=$1 llama_tokenize=$2 ours=$3 model=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$src" && find . -name '*.md' -not -path './build/*' -print0 | sort -z | xargs -0 cat) \
  | python3 -c "import sys; b = sys.stdin.buffer.read()[:1000000]; sys.stdout.buffer.write(b.decode('utf-8', 'ignore').encode())" \
  > "$work/text.txt"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_runs() {
  "$@" > /dev/null 2>&1
  for _ in 1 2 3 4 5; do
    local t0 t1
    t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
  done | median
}
"$llama_tokenize" -m "$model" -f "$work/text.txt" --ids --no-bos --no-escape --log-disable > "$work/llama.ids" 2>/dev/null
"$ours" tokenize --model "$model" --file "$work/text.txt" --no-bos > "$work/ours.ids" 2> "$work/ours.err"
cmp -s "$work/llama.ids" "$work/ours.ids" && same=yes || same=NO
tokens=$(tr ',' '\n' < "$work/ours.ids" | wc -l)
echo "| cores | text | model | tokens | ids equal | llama-tokenize (s) | candle-rocm-llm tokenize (s) | speed ratio |"
echo "|---|---|---|---|---|---|---|---|"
# all the machine's cores, then one (taskset: the parts of a long text run on the cores it may use)
for cores in "$(nproc)" 1; do
  pin=(); [ "$cores" = 1 ] && pin=(taskset -c 0)
  l=$(time_runs "${pin[@]}" "$llama_tokenize" -m "$model" -f "$work/text.txt" --ids --no-bos --no-escape --log-disable)
  o=$(time_runs "${pin[@]}" "$ours" tokenize --model "$model" --file "$work/text.txt" --no-bos)
  printf "| %s | %s bytes | %s | %s | %s | %.3f | %.3f | %.2fx |\n" "$cores" "$(wc -c < "$work/text.txt")" "$(basename "$model")" "$tokens" "$same" "$l" "$o" "$(echo "$l / $o" | bc -l)"
done
echo
echo "candle-rocm-llm's own report: $(cat "$work/ours.err")"
