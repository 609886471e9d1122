#!/usr/bin/env bash
# Build NVIDIA's nvidia-ctk and nvidia-cdi-hook (what the specs it writes run as hooks) from their pinned Go
# module (go.mod here) and print the folder that holds both; cached per version in
# ${NPUOPS_LAB_CACHE:-~/.cache/npuops-lab}/bin/ctk-<version>/ (about 1 min cold on 2 cores).
# cgo: its NVML bindings dlopen libnvidia-ml.so.1 at run time (absent on this machine: never loaded here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ver=$(cd "$here" && go list -m -f '{{.Version}}' github.com/NVIDIA/nvidia-container-toolkit)
dir=${NPUOPS_LAB_CACHE:-$HOME/.cache/npuops-lab}/bin/ctk-$ver
for cmd in nvidia-ctk nvidia-cdi-hook; do
  out=$dir/$cmd
  [ -x "$out" ] && continue
  echo "building $cmd $ver..." >&2
  mkdir -p "$dir"
  (cd "$here" && CGO_ENABLED=1 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-local} \
    go build -p 2 -trimpath -ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${ver#v}" \
    -o "$out.tmp.$$" "github.com/NVIDIA/nvidia-container-toolkit/cmd/$cmd")
  mv -f "$out.tmp.$$" "$out" # atomic: a half-built binary never looks cached
done
echo "$dir"
