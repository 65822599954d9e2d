#!/usr/bin/env bash
# Stop the dockerd that ensure-docker.sh started (and only that one).
pidfile=/run/testbed-dockerd.pid
[ -f "$pidfile" ] || exit 0
pid=$(cat "$pidfile")
if kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
fi
rm -f "$pidfile"
