#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: set-up (engine, venv, sandbox image), then pytest.
#
# With no arguments it runs in two parts: the tests that need no Docker engine, spread over two
# processes (pytest-xdist), then the tests marked `docker`, one at a time. Those start containers,
# send signals after waits, drive tmux and start a Ray cluster; a second process's load beside them
# is what made such tests flaky, so they keep the machine to themselves. Both parts always run; the
# script fails if either does. With arguments it is one pytest with those arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --for-tests

run_pytest() {
  local status=0
  .venv/bin/python -m pytest "$@" || status=$?
  if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
    return 1
  fi
  return "$status"
}

if [ "$#" -gt 0 ]; then
  run_pytest "$@" || exit $?
  exit 0
fi
status=0
run_pytest -m "not docker" -n 2 || status=$?
run_pytest -m docker || { code=$?; [ "$status" -ne 0 ] || status=$code; }
exit "$status"
