#!/bin/sh
# Capture the broker's port on the broker's interface into /data/capture/capture.pcapng.
# Written through stdout (dumpcap flushes a pipe's output more often than a file's); a sweep's block cuts each
# cell's packets from the running file, waiting until it holds a packet from after the cell (lab/keptlab.py).
# The file is its owner's only (0600, umask 077): a plain CONNECT carries its password in clear
# (orchestrator/model/layout.py PRIVATE_FILES).
set -eu
umask 077
mkdir -p /data/capture
IFACE=${TESTBED_CAPTURE_IFACE:-eth0}
exec dumpcap -q -i "$IFACE" -f "tcp port ${TESTBED_PORT:?}" -w - > /data/capture/capture.pcapng
