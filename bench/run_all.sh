#!/usr/bin/env bash
# Runs every bench/bench_*.py (sorted) against the lab. Starts the lab when it is down and stops it
# again at the end only in that case. Results: printed, and JSON under build/bench/.
# Usage: bench/run_all.sh [name ...]   (name = bench_<name>.py, e.g. `audit`)
# Add a benchmark: drop bench/bench_<name>.py (executable with the venv's python, exit 0 = target met).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$PWD/build/collections"
export NPUOPS_LAB_DIR="${NPUOPS_LAB_DIR:-/tmp/npuops-lab}"
export KUBECONFIG="${KUBECONFIG:-$NPUOPS_LAB_DIR/kubeconfig}"
mkdir -p build/bench build/collections/ansible_collections/npuops
[ -e build/collections/ansible_collections/npuops/fleet ] || ln -s "$PWD" build/collections/ansible_collections/npuops/fleet

started=0
if ! tests/lab/labctl status >/dev/null 2>&1; then
  echo "bench: lab is down; starting it (tests/lab/labctl up)"
  tests/lab/labctl up >/dev/null
  started=1
fi
# stop the lab on exit only if this script started it
trap 'if [ "$started" = 1 ]; then echo "bench: stopping the lab we started"; tests/lab/labctl down >/dev/null; fi' EXIT

if [ "${1:-}" = "--fleet" ]; then
  scripts=(bench/fleet_window.py bench/admission_snapshot.py)
elif [ "$#" -gt 0 ]; then
  scripts=(); for n in "$@"; do scripts+=("bench/bench_${n}.py"); done
else
  scripts=(bench/bench_*.py)  # glob expansion is sorted
fi
rc=0
for s in "${scripts[@]}"; do
  echo "== $s"
  python "$s" || rc=1
done
exit "$rc"
