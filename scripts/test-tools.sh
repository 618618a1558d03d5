#!/usr/bin/env bash
# What two tests need besides cairn, on Debian as root; elsewhere (or if apt fails) they are skipped.
#   - a headless Chromium, for the test that loads a `cairn report` page;
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
    echo "setup: installing chromium (for the report test)"
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
