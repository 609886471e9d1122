#!/usr/bin/env bash
# `make bench`: runs every benchmark under bench/ (bench/run_all.sh) against the lab.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bench/run_all.sh "$@"
