#!/usr/bin/env bash
# The set-up every entry point runs first (scripts/demo.sh, scripts/test.sh, CI):
#   1. a Docker engine that answers (scripts/ensure-docker.sh starts one on Debian as root);
#   2. with --for-tests, what two tests need besides (scripts/test-tools.sh);
#   3. .venv/ with cairn installed in editable mode, with its test extras (and Ray, for the tests of
#      `cairn batch --ray`, with --for-tests);
#   4. the sandbox image (built once; later runs find it by its content hash and skip the build).
# Each step is skipped when already done, so running this again costs a few seconds.
# Needs no terminal: CI runs it with stdin closed.
set -euo pipefail
cd "$(dirname "$0")/.."

# litellm fetches its model price list from the internet at import unless told to use its own copy.
export LITELLM_LOCAL_MODEL_COST_MAP=True

bash scripts/ensure-docker.sh
extras=test
if [[ "${1:-}" == "--for-tests" ]]; then
    bash scripts/test-tools.sh
    extras=test,ray
fi

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup: cairn needs Python 3.11 or newer; python3 is $(python3 --version 2>&1)" >&2
    exit 1
fi

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $(python3 --version)"
    python3 -m venv .venv || {
        echo "setup: python3 -m venv failed; on Debian: apt-get install python3-venv" >&2
        exit 1
    }
fi

# The stamp holds the hash of the pyproject.toml last installed: the install is editable, so only a
# change of dependencies or entry points needs pip again.
stamp=.venv/.cairn-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
    echo "setup: installing cairn and its dependencies into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
    echo "$want" >"$stamp"
fi

# Progress (the build log, when there is a build) goes to stderr; the tag comes on stdout.
tag="$(.venv/bin/cairn image build)"
echo "setup: sandbox image $tag is ready"
