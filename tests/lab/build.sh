#!/usr/bin/env bash
# Build the lab binaries from their pinned Go modules (no container engine can pull images here).
# Versions come from the wrapper go.mod files next to this script; binaries are cached per version
# in ${NPUOPS_LAB_CACHE:-~/.cache/npuops-lab}/bin/<version>/ so only the first build is slow.
# Prints the three bin dirs (k8s, etcd, kwok) as KEY=path lines on stdout; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${NPUOPS_LAB_CACHE:-$HOME/.cache/npuops-lab}/bin

modver() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2"); }
K8S=$(modver k8s k8s.io/kubernetes)
ETCD=$(modver etcd go.etcd.io/etcd/server/v3)
KWOK=$(modver kwok sigs.k8s.io/kwok)
: "${K8S:?}" "${ETCD:?}" "${KWOK:?}"

export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-local}
# -p 2: the build machines have 2 cores; more parallelism only adds memory pressure.
gobuild() { # dir out pkg extra-ldflags
  local dir=$1 out=$2 pkg=$3 ld=$4
  [ -x "$out" ] && return 0
  echo "building $(basename "$out") ($pkg)..." >&2
  mkdir -p "$(dirname "$out")"
  (cd "$here/$dir" && go build -p 2 -trimpath -ldflags "-s -w $ld" -o "$out.tmp.$$" "$pkg")
  mv -f "$out.tmp.$$" "$out" # atomic: a half-built binary never looks cached
}

# Same ldflags as hack/lib/version.sh, so `kubectl version` shows the real release.
minor=${K8S#v1.}; minor=${minor%%.*}
kv=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kv+=" -X $p.gitVersion=$K8S -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  kv+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done

mkdir -p "$cache"
exec 9>"$cache/.lock" && flock 9 # concurrent `labctl up`s (other NPUOPS_LAB_DIRs) build once, in turn
kdir=$cache/$K8S edir=$cache/etcd-$ETCD wdir=$cache/kwok-$KWOK
gobuild etcd "$edir/etcd" go.etcd.io/etcd/server/v3 ""
gobuild kwok "$wdir/kwok" sigs.k8s.io/kwok/cmd/kwok ""
# The kwok binary has no built-in stages (kwokctl injects them): ship the pinned release's own
# default node/pod stages (fast init, lease heartbeat, pods Running at once, graceful delete).
if [ ! -s "$wdir/stages.yaml" ]; then
  src=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
           pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---"; cat "$src/$f.yaml"
  done > "$wdir/stages.yaml.tmp" && mv -f "$wdir/stages.yaml.tmp" "$wdir/stages.yaml"
fi
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  gobuild k8s "$kdir/$c" "k8s.io/kubernetes/cmd/$c" "$kv"
done
echo "K8S_BIN=$kdir"
echo "ETCD_BIN=$edir"
echo "KWOK_BIN=$wdir"
