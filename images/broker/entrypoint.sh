#!/bin/sh
# Copy the run's PKI and password list where Mosquitto can read them, hash the passwords, then exec
# the broker. The container runs as the user who runs testbed (compose/testbed.yml `user:`), so the
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
exec mosquitto -c "$DATA/config/mosquitto.conf"
