#!/bin/sh
# Copy the run's PKI and password list where the mosquitto user can read them (Mosquitto drops
# privileges BEFORE it reads certificates), hash the passwords, then exec the broker.
set -eu
DATA=${TESTBED_DATA:-/data}
mkdir -p /run/testbed/pki
if [ -d "$DATA/pki" ]; then
  for f in ca.crt server.crt server.key; do
    [ -f "$DATA/pki/$f" ] && cp "$DATA/pki/$f" /run/testbed/pki/
  done
  if [ -f "$DATA/pki/passwords.txt" ]; then
    cp "$DATA/pki/passwords.txt" /run/testbed/passwords
    mosquitto_passwd -U /run/testbed/passwords
  fi
fi
chown -R mosquitto:mosquitto /run/testbed
chmod 0600 /run/testbed/pki/*.key /run/testbed/passwords 2>/dev/null || true
if [ -f "$DATA/config/openssl.cnf" ]; then
  export OPENSSL_CONF="$DATA/config/openssl.cnf"
fi
exec mosquitto -c "$DATA/config/mosquitto.conf"
