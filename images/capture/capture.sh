#!/bin/sh
# Capture the broker's port on the broker's interface into /data/capture/capture.pcapng.
# Written through stdout: dumpcap then flushes every packet as it writes it, so the file is whole up to its
# last packet while the capture runs (a sweep's block cuts each cell's packets from it: lab/capture_split.py).
set -eu
mkdir -p /data/capture
IFACE=${TESTBED_CAPTURE_IFACE:-eth0}
exec dumpcap -q -i "$IFACE" -f "tcp port ${TESTBED_PORT:?}" -w - > /data/capture/capture.pcapng
