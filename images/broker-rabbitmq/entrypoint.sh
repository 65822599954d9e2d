#!/bin/sh
# RabbitMQ as the cell's broker (images/broker-rabbitmq/Dockerfile). Copies the run's PKI where the node reads it,
# writes the definitions file the node imports at boot (the run's users, each password hashed as RabbitMQ's
# rabbit_password_hashing_sha256: base64(salt + sha256(salt + password)) with a 4-byte random salt; never a
# password in clear outside the run's pki/), then runs the node as this shell's child, as images/broker/entrypoint.sh
# runs Mosquitto: testbed-broker-restart (images/broker-rabbitmq/restart.sh) ends the node and this loop starts a new
# one in the same container. Each start begins from an empty database (the old node's queues, sessions and TLS
# session cache are gone, as with Mosquitto's persistence off). The node runs in its own session (setsid), so the
# restart and a kill reach its whole process tree (the shell script, beam.smp, erl_child_setup).
# The Erlang VM's schedulers do not busy-wait: RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS (recorded in cell.json's broker,
# orchestrator/lab/rabbitmqconf.py ERL_ARGS).
set -eu
DATA=${TESTBED_DATA:-/data}
PRIV=/run/testbed
umask 077
mkdir -p "$PRIV/pki" "$PRIV/home"
if [ -d "$DATA/pki" ]; then
  for f in ca.crt server.crt server.key; do
    [ -f "$DATA/pki/$f" ] && cp "$DATA/pki/$f" "$PRIV/pki/"
  done
fi
chmod 0644 "$PRIV/pki/"*.crt 2>/dev/null || true

hash_password() {  # $1: the password -> RabbitMQ's sha256 hash
  salt=$PRIV/salt.bin
  openssl rand -out "$salt" 4
  { cat "$salt"; printf '%s' "$1"; } | openssl dgst -sha256 -binary > "$PRIV/digest.bin"
  cat "$salt" "$PRIV/digest.bin" | base64 -w0
  rm -f "$salt" "$PRIV/digest.bin"
}
user_json() {  # $1 user, $2 password
  printf '{"name":"%s","password_hash":"%s","hashing_algorithm":"rabbit_password_hashing_sha256","tags":[]}' \
    "$1" "$(hash_password "$2")"
}
perm_json() {
  printf '{"user":"%s","vhost":"/","configure":".*","write":".*","read":".*"}' "$1"
}
users= perms= sep=
add_user() {
  users="$users$sep$(user_json "$1" "$2")"; perms="$perms$sep$(perm_json "$1")"; sep=,
}
if [ -f "$DATA/pki/passwords.txt" ]; then
  while IFS=: read -r name password; do
    [ -n "$name" ] && add_user "$name" "$password"
  done < "$DATA/pki/passwords.txt"
fi
if grep -q '^mqtt.allow_anonymous = true' "$DATA/config/rabbitmq.conf"; then
  add_user anonymous anonymous  # mqtt.default_user / default_pass of an anonymous scenario
fi
printf '{"users":[%s],"vhosts":[{"name":"/"}],"permissions":[%s]}\n' "$users" "$perms" > "$PRIV/definitions.json"

export HOME="$PRIV/home"
export RABBITMQ_CONFIG_FILE="$DATA/config/rabbitmq.conf"
export RABBITMQ_NODENAME=rabbit@localhost
export RABBITMQ_MNESIA_BASE="$PRIV/db"
export RABBITMQ_LOG_BASE="$PRIV/log"
export RABBITMQ_ENABLED_PLUGINS_FILE="$PRIV/enabled_plugins"
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none"
echo '[rabbitmq_mqtt].' > "$RABBITMQ_ENABLED_PLUGINS_FILE"
child=
stop() { [ -n "$child" ] && kill -TERM "-$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0; }
trap stop TERM INT
while :; do
  rm -f "$PRIV/restart"
  rm -rf "$RABBITMQ_MNESIA_BASE"
  setsid /usr/lib/rabbitmq/bin/rabbitmq-server &
  child=$!
  echo "$child" > "$PRIV/broker.pid"
  status=0
  wait "$child" || status=$?
  [ -e "$PRIV/restart" ] || exit "$status"
  while kill -0 "-$child" 2>/dev/null; do sleep 0.05; done  # the old node's last process gone
done
