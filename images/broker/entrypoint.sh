#!/bin/sh
# Copy the run's PKI and password list where Mosquitto can read them, hash the passwords, then run
# the broker as this shell's child: testbed-broker-restart (images/broker/restart.sh; lab/broker.py
# restart_process) ends that process and this loop starts a new one from the same files, in the same
# container, so its network namespace - and the capture sharing it - stays up. A broker that exits
# without that request ends the container with its exit code, as before. The container runs as the user who runs testbed (compose/testbed.yml `user:`), so the
# files it writes into /data are theirs. Started as root (a root user, or rootless Docker), Mosquitto
# drops to the mosquitto user BEFORE it reads certificates: the copies are then given to that user.
set -eu
DATA=${TESTBED_DATA:-/data}
PRIV=/run/testbed
umask 077
mkdir -p "$PRIV/pki"
if [ -d "$DATA/pki" ]; then
  for f in ca.crt server.crt server.key; do
    [ -f "$DATA/pki/$f" ] && cp "$DATA/pki/$f" "$PRIV/pki/"
  done
  if [ -f "$DATA/pki/passwords.hashed" ]; then
    # already hashed (a lab's broker host gets no password of the publisher's in clear: lab/credentials.py)
    cp "$DATA/pki/passwords.hashed" "$PRIV/passwords"
  elif [ -f "$DATA/pki/passwords.txt" ]; then
    cp "$DATA/pki/passwords.txt" "$PRIV/passwords"
    mosquitto_passwd -U "$PRIV/passwords"
  fi
fi
chmod 0644 "$PRIV/pki/"*.crt 2>/dev/null || true
if [ "$(id -u)" = 0 ]; then
  chown -R mosquitto:mosquitto "$PRIV"
fi
if [ -f "$DATA/config/openssl.cnf" ]; then
  export OPENSSL_CONF="$DATA/config/openssl.cnf"
fi
child=
stop() { [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0; }
trap stop TERM INT
while :; do
  rm -f "$PRIV/restart"
  mosquitto -c "$DATA/config/mosquitto.conf" &
  child=$!
  echo "$child" > "$PRIV/broker.pid"
  status=0
  wait "$child" || status=$?
  [ -e "$PRIV/restart" ] || exit "$status"
done
