#!/usr/bin/env bash
# The offline demo: set-up, then a scripted run of a small real task in the sandbox, then its timeline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CAIRN_RUNS_DIR="${CAIRN_RUNS_DIR:-$HOME/.cairn/runs}"
.venv/bin/cairn demo
