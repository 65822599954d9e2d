#!/bin/sh
# Healthy when mosquitto listens on the scenario's port (state 0A = LISTEN in /proc/net/tcp).
port_hex=$(printf '%04X' "${TESTBED_PORT:?}")
grep -q ":${port_hex} [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
