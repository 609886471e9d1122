#!/usr/bin/env bash
# `make bench`: runs every benchmark under bench/ (bench/run_all.sh) against the lab.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fleet" ]; then
  shift
  # started and stopped like bench/run_all.sh: the lab up if it is down
  exec bench/run_all.sh --fleet "$@"
fi
exec bench/run_all.sh "$@"
