#!/usr/bin/env bash
# Joins the SmolLM2 GGUF that travels in two halves apart from a pack (.gpu-gguf-1 and
# .gpu-gguf-2 beside the pack folder, each carried by an earlier call), checks it against the
# pack's models/<name>.sha256 and prints its path. Usage: bash join-gguf.sh <pack folder>
set -u
pack=$1
sum=$(ls "$pack"/models/*.gguf.sha256 2>/dev/null | head -1)
[ -n "$sum" ] || { echo "no GGUF checksum in $pack/models" >&2; exit 1; }
gguf=${sum%.sha256}
if [ ! -f "$gguf" ]; then
  name=$(basename "$gguf")
  cat "$pack/../.gpu-gguf-1/$name.part1" "$pack/../.gpu-gguf-2/$name.part2" > "$gguf.tmp" 2>/dev/null
  if [ "$(sha256sum < "$gguf.tmp" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$sum")" ]; then
    mv "$gguf.tmp" "$gguf"
  else
    rm -f "$gguf.tmp"
    echo "the halves of $name are missing or damaged: carry .gpu-gguf-1, then .gpu-gguf-2, each in a call of its own, before this one" >&2
    exit 1
  fi
fi
echo "$gguf"
