#!/usr/bin/env bash
# Builds (once) a Debian sid chroot holding ROCm 6.4's HIP runtime, hiprtc, rocBLAS and MIOpen,
# the AMD tier's compiler and libraries, RCCL's library and header, and LLVM 21's tools (the
# llvm-objdump the emulator's decoder is held against; hiprtc's comgr is built on LLVM 21). Idempotent: a finished
# chroot is marked and reused.
# Usage: amd-chroot.sh <dir>
set -euo pipefail
root=${1:?usage: amd-chroot.sh <dir>}
marker="$root/.candle-rocm-ready"
packages="libamdhip64-6 libamdhip64-dev libhiprtc6 libhiprtc-builtins6 libmiopen1 libmiopen-dev librocblas-dev llvm-21"
# Debian sid's RCCL (5.4.3) depends on a HIP 5 runtime sid can no longer install: its files are
# unpacked, not installed. The AMD tier reads its header and its exported symbols; it is not
# loaded there.
unpacked="librccl1 librccl-dev"
ready="$packages; unpacked: $unpacked"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$ready" ]; then
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
mkdir -p "$root"
if [ ! -x "$root/usr/bin/apt-get" ]; then
  # A half-finished bootstrap cannot be resumed reliably: start over.
  rm -rf "$root"
  mkdir -p "$root"
  debootstrap --variant=minbase sid "$root" >/dev/null
fi
# The mirror may serve a sid Release file older than this machine's clock believes valid.
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
  "apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq --no-install-recommends $packages >/dev/null && apt-get clean"
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
  "cd /tmp && rm -f ./*.deb && apt-get download -qq $unpacked && for d in ./*.deb; do dpkg -x \"\$d\" /; done && rm -f ./*.deb"
echo "$ready" > "$marker"
