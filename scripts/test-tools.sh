#!/usr/bin/env bash
# What three tests need besides cairn, on Debian as root; elsewhere (or if apt fails) they are skipped.
#   - a headless Chromium, for the tests that load a `cairn report` page and `cairn serve`'s pages (these
#     drive it with the playwright package of the test extras, never a browser of its own download);
#   - gVisor's runsc, for the test of `cairn run --runtime runsc` (registered with dockerd, see below);
#   - an OpenSSH server binary, for the test that reaches the engine through DOCKER_HOST=ssh:// (the
#     test starts its own sshd, on a free port with its own keys). The package would start and enable
#     its service on a machine booted with systemd, so it is installed only where none runs (a CI
#     runner, a container), and with services kept from starting during the install.
# Run by `scripts/setup.sh --for-tests` (scripts/test.sh); the demo does not install either.
set -euo pipefail

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
