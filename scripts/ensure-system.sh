#!/usr/bin/env bash
# Install the host tools the tests and the demo need (Debian/Ubuntu as root), or say how.
set -euo pipefail
PKGS=(tshark debootstrap libmbedtls-dev g++ cmake make mosquitto mosquitto-clients iproute2 nftables openssl
      procps kmod)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ensure-system: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts a system mosquitto on 1883 when it installs it: the testbed's broker needs the port
  if command -v systemctl >/dev/null && systemctl is-active -q mosquitto 2>/dev/null; then
    systemctl disable --now mosquitto || true
  fi
  pkill -x mosquitto 2>/dev/null || true
else
  echo "ensure-system: missing packages: ${missing[*]}" >&2
  echo "  install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
