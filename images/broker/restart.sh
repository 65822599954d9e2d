#!/bin/sh
# Restart the broker PROCESS, not its container (the entrypoint's loop starts a new one; lab/broker.py
# restart_process): its sessions, retained messages, queues and TLS session cache go with the old process.
# --kill ends it with SIGKILL (a crash), else SIGTERM (a clean stop). Returns once the new one listens.
set -eu
PRIV=/run/testbed
old=$(cat "$PRIV/broker.pid")
: > "$PRIV/restart"
if [ "${1:-}" = "--kill" ]; then kill -KILL "$old"; else kill -TERM "$old"; fi
i=0
while kill -0 "$old" 2>/dev/null || [ "$(cat "$PRIV/broker.pid")" = "$old" ] \
      || ! /usr/local/bin/testbed-broker-health; do
  i=$((i + 1))
  if [ "$i" -gt 1000 ]; then echo "the broker did not come back within 20 s" >&2; exit 1; fi
  sleep 0.02
done
