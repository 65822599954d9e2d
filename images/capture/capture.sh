#!/bin/sh
# Capture the broker's port on the broker's interface into /data/capture/capture.pcapng.
set -eu
mkdir -p /data/capture
IFACE=${TESTBED_CAPTURE_IFACE:-eth0}
exec dumpcap -q -i "$IFACE" -f "tcp port ${TESTBED_PORT:?}" -w /data/capture/capture.pcapng
