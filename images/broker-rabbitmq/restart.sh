#!/bin/sh
# Restart the RabbitMQ node, not its container (images/broker-rabbitmq/entrypoint.sh's loop starts a new one;
# orchestrator/lab/broker.py restart_process): SIGTERM to the node's whole process group (beam.smp stops cleanly on
# it), SIGKILL with --kill (a crash). Returns once the new node's MQTT listener listens: a RabbitMQ node takes
# seconds to boot (the Erlang VM, the database, the definitions, the plugin), so this waits up to 90 s; the time
# it took is printed (the caller records it).
set -eu
PRIV=/run/testbed
old=$(cat "$PRIV/broker.pid")
start=$(date +%s.%N)
: > "$PRIV/restart"
if [ "${1:-}" = "--kill" ]; then kill -KILL "-$old"; else kill -TERM "-$old"; fi
i=0
while kill -0 "-$old" 2>/dev/null || [ "$(cat "$PRIV/broker.pid")" = "$old" ] \
      || ! /usr/local/bin/testbed-broker-health; do
  i=$((i + 1))
  if [ "$i" -gt 1800 ]; then echo "the broker did not come back within 90 s" >&2; exit 1; fi
  sleep 0.05
done
echo "restarted in $(echo "$(date +%s.%N) - $start" | awk '{print $1 - $3}') s"
