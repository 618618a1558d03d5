#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: set-up (engine, venv, sandbox image), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --for-tests
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$status"
