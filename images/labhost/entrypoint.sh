#!/bin/sh
# Start a lab host: its own host keys, the authorized key, then sshd in the foreground.
# The key: the file /etc/testbed/authorized_keys (mounted read-only) or TESTBED_AUTHORIZED_KEY.
set -eu
keys=/root/.ssh/authorized_keys
if [ -s /etc/testbed/authorized_keys ]; then
    cat /etc/testbed/authorized_keys > "$keys"
elif [ -n "${TESTBED_AUTHORIZED_KEY:-}" ]; then
    printf '%s\n' "$TESTBED_AUTHORIZED_KEY" > "$keys"
else
    echo "testbed-labhost: no authorized key (mount /etc/testbed/authorized_keys or set TESTBED_AUTHORIZED_KEY)" >&2
    exit 2
fi
chmod 0600 "$keys"
mkdir -p /run/sshd
ssh-keygen -A
exec /usr/sbin/sshd -D -e
