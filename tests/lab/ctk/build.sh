#!/usr/bin/env bash
# Build NVIDIA's nvidia-ctk from its pinned Go module (go.mod here) and print the binary's path; cached per
# version in ${NPUOPS_LAB_CACHE:-~/.cache/npuops-lab}/bin/ctk-<version>/ (about 40 s cold on 2 cores).
# cgo: its NVML bindings dlopen libnvidia-ml.so.1 at run time (absent on this machine: never loaded here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ver=$(cd "$here" && go list -m -f '{{.Version}}' github.com/NVIDIA/nvidia-container-toolkit)
out=${NPUOPS_LAB_CACHE:-$HOME/.cache/npuops-lab}/bin/ctk-$ver/nvidia-ctk
if [ ! -x "$out" ]; then
  echo "building nvidia-ctk $ver..." >&2
  mkdir -p "$(dirname "$out")"
  (cd "$here" && CGO_ENABLED=1 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-local} \
    go build -p 2 -trimpath -ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${ver#v}" \
    -o "$out.tmp.$$" github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk)
  mv -f "$out.tmp.$$" "$out" # atomic: a half-built binary never looks cached
fi
echo "$out"
