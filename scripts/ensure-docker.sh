#!/usr/bin/env bash
# Make sure a Docker engine answers, starting one if this is a Debian machine and we are root.
#
#   bash scripts/ensure-docker.sh
#
# Exit 0 with one line when an engine answers (it was running, or this script started it); exit 1
# saying what is missing otherwise. Safe to run again and again: a running engine is left alone.
#
# The engine is started with plain `nohup dockerd` because the machines this is for (CI runners, bare
# containers) have no systemd. Its log goes to /var/log/cairn-dockerd.log.
set -euo pipefail

LOG=/var/log/cairn-dockerd.log
WAIT_SECONDS=${CAIRN_DOCKERD_WAIT:-60}

say() { printf 'ensure-docker: %s\n' "$*"; }
fail() { printf 'ensure-docker: %s\n' "$*" >&2; exit 1; }

engine_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

report_running() {
    say "Docker engine $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?') is running"
}

if engine_answers; then
    report_running
    exit 0
fi

if [[ -n "${DOCKER_HOST:-}" ]]; then
    # Starting a local engine would not help: every client is pointed elsewhere.
    fail "DOCKER_HOST=$DOCKER_HOST does not answer; start that engine, or unset DOCKER_HOST to use a local one"
fi

is_debian=false
[[ -f /etc/debian_version ]] && command -v apt-get >/dev/null 2>&1 && is_debian=true

if [[ "$(id -u)" != 0 || "$is_debian" != true ]]; then
    case "$(uname -s)" in
        Darwin) fail "no Docker engine answers: start Docker Desktop (or e.g. 'colima start')" ;;
    esac
    if command -v dockerd >/dev/null 2>&1 || [[ -x /usr/sbin/dockerd || -x /usr/bin/dockerd ]]; then
        fail "no Docker engine answers: start it (e.g. 'sudo systemctl start docker'); if it runs but refuses" \
             "you, add yourself to the docker group ('sudo usermod -aG docker \$USER', then log in again)"
    fi
    fail "no Docker engine is installed: install one (https://docs.docker.com/engine/install/)," \
         "or run this script as root on Debian to have it installed"
fi

# Debian, root: install what is missing, then start the engine.
# debootstrap comes along because cairn makes its base image with it where no registry can be reached.
export PATH="$PATH:/usr/sbin:/sbin"
missing=()
{ command -v dockerd && command -v docker; } >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ((${#missing[@]})); then
    say "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || fail "apt-get update failed; is the Debian mirror reachable?"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || fail "apt-get install ${missing[*]} failed; run it by hand to see why"
fi

# An engine started moments ago (by a parallel run of this script) may still be coming up: wait for it
# rather than start a second one that would fight it for /var/run/docker.pid. setsid puts dockerd in
# a session of its own, so a Ctrl-C meant for the caller (dockerd handles SIGINT) does not stop it.
if ! pgrep -x dockerd >/dev/null 2>&1; then
    say "starting dockerd (log: $LOG)"
    setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
fi

for ((second = 0; second < WAIT_SECONDS; second++)); do
    if engine_answers; then
        report_running
        exit 0
    fi
    sleep 1
done

printf 'ensure-docker: dockerd did not answer within %ss; last lines of %s:\n' "$WAIT_SECONDS" "$LOG" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
