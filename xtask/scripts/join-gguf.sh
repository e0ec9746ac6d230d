#!/usr/bin/env bash
# Joins the SmolLM2 GGUF that travels in two halves apart from a pack (.gpu-gguf-1 and
# .gpu-gguf-2 beside the pack folder, each carried by an earlier call that copied it off the
# checkout into $GPU_SIDE, default ~/gpu-side: see docs/testing.md, "On a GPU machine"), checks it
# against the pack's models/<name>.sha256 and prints its path. Usage: bash join-gguf.sh <pack>
set -u
pack=$1
side=${GPU_SIDE:-$HOME/gpu-side}
sum=$(ls "$pack"/models/*.gguf.sha256 2>/dev/null | head -1)
[ -n "$sum" ] || { echo "no GGUF checksum in $pack/models" >&2; exit 1; }
gguf=${sum%.sha256}
if [ ! -f "$gguf" ]; then
  name=$(basename "$gguf")
  # each half beside the pack, or where an earlier call put it
  part() { for d in "$pack/../.gpu-gguf-$1" "$side"; do [ -f "$d/$name.part$1" ] && { echo "$d/$name.part$1"; return; }; done; }
  # a temporary of this process's own: joins running side by side never share one
  tmp="$gguf.tmp.$$"
  cat "$(part 1)" "$(part 2)" > "$tmp" 2>/dev/null
  if [ "$(sha256sum < "$tmp" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$sum")" ]; then
    mv "$tmp" "$gguf"
  else
    rm -f "$tmp"
    echo "the halves of $name are missing or damaged: carry .gpu-gguf-1, then .gpu-gguf-2, each in a call of its own that copies it into $side, before this one" >&2
    exit 1
  fi
fi
echo "$gguf"
