#!/usr/bin/env bash
# The host packages `make demo` or `make test` needs: as root on Debian/Ubuntu install what is missing;
# as anyone else install nothing, print the exact command once, and fail only when MODE needs it.
# Usage: ensure-system.sh [demo|test|check]   (default test: `make system`)
#   demo: tshark (the analysis), debootstrap (an offline base image when no registry answers)
#   test: the above, plus the firmware core's build (g++ cmake make libmbedtls-dev) and the tools the
#         unit and firmware tests run on the host (mosquitto, openssl, tc/ip, nft, ps, modprobe, setpriv,
#         chromium for the report's layout test)
#   check: what `make check` runs: test's list less CHECK_SKIP (the images, the docker-group user)
# The Docker engine and compose v2 are scripts/ensure-docker.sh's job.
set -euo pipefail
MODE=${1:-test}
DEMO_PKGS=(tshark debootstrap)
TEST_PKGS=(g++ cmake make libmbedtls-dev mosquitto mosquitto-clients openssl iproute2 nftables procps kmod
           util-linux passwd python3-venv gcc pkg-config libnetfilter-queue-dev iptables chromium)
# passwd (useradd), python3-venv: the tests' unprivileged user; gcc..iptables: the delay line (images/netadmin/delayline);
# chromium: the report's layout test renders report.html headless (tests/unit/report/test_report_layout.py)
CHECK_SKIP=" debootstrap passwd python3-venv "  # only the images and the integration tests' docker-group user
# test, check: wanted, never required. ccache: the firmware tests build the core in fresh folders several times a run;
# with it, a `make check` after an edit compiles only what changed (compiler_cache in tests/firmware/fwtest_support.py)
OPTIONAL_PKGS=(ccache)
case $MODE in
  demo|test|check) ;;
  *) echo "ensure-system: unknown mode '$MODE' (demo, test or check)" >&2; exit 2 ;;
esac

# What shows a package is there when there is no dpkg (not Debian/Ubuntu): a program or a header.
probe_of() {
  case $1 in
    libmbedtls-dev) echo /usr/include/mbedtls/ssl.h ;;
    mosquitto-clients) echo mosquitto_pub ;;
    iproute2) echo tc ;;
    nftables) echo nft ;;
    procps) echo pkill ;;
    kmod) echo modprobe ;;
    util-linux) echo setpriv ;;
    *) echo "$1" ;;
  esac
}

installed() {
  if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
    return
  fi
  local probe
  probe=$(probe_of "$1")
  case $probe in
    /*) [ -e "$probe" ] ;;
    *) PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v "$probe" >/dev/null 2>&1 ;;
  esac
}

# needed: what MODE cannot do without; later: what only `make test` needs (reported in demo mode)
needed=()
later=()
for p in "${DEMO_PKGS[@]}" "${TEST_PKGS[@]}"; do
  installed "$p" && continue
  case $MODE in
    test) needed+=("$p") ;;
    demo) if [[ " ${DEMO_PKGS[*]} " == *" $p "* ]]; then needed+=("$p"); else later+=("$p"); fi ;;
    check) if [[ $CHECK_SKIP == *" $p "* ]]; then later+=("$p"); else needed+=("$p"); fi ;;
  esac
done

optional=()
if [ "$MODE" != demo ]; then
  for p in "${OPTIONAL_PKGS[@]}"; do installed "$p" || optional+=("$p"); done
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  [ ${#needed[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0
  echo "ensure-system: installing ${needed[*]}${needed[*]:+ }${optional[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || [ ${#needed[@]} -eq 0 ]  # fatal only when something needed is missing
  [ ${#needed[@]} -eq 0 ] || apt-get install -y -q --no-install-recommends "${needed[@]}" >/dev/null
  if [ ${#optional[@]} -gt 0 ]; then
    apt-get install -y -q --no-install-recommends "${optional[@]}" >/dev/null ||
      echo "ensure-system: could not install ${optional[*]} (wanted, not needed: the builds are only slower)" >&2
  fi
  # Debian starts a system mosquitto on 1883 when it installs it: the testbed's broker needs the port
  if command -v systemctl >/dev/null && systemctl is-active -q mosquitto 2>/dev/null; then
    systemctl disable --now mosquitto || true
  fi
  pkill -x mosquitto 2>/dev/null || true
  exit 0
fi

install_line() {
  if command -v apt-get >/dev/null 2>&1; then
    echo "sudo apt-get install -y $*"
  else
    echo "install with your package manager (Debian/Ubuntu names): $*"
  fi
}

if [ ${#needed[@]} -gt 0 ]; then
  {
    echo "ensure-system: \`make $MODE\` needs host packages that are missing: ${needed[*]}"
    if [ "$(id -u)" = 0 ]; then why="no apt-get here"; else why="not root"; fi
    echo "  Nothing was installed ($why). Install them, then run \`make $MODE\` again:"
    echo "    $(install_line "${needed[@]}")"
    if [ ${#later[@]} -gt 0 ]; then
      echo "  (\`make test\` will also need: $(install_line "${later[@]}"))"
    fi
  } >&2
  exit 1
fi
if [ ${#later[@]} -gt 0 ]; then
  echo "ensure-system: (only for \`make test\`, not needed now: $(install_line "${later[@]}"))" >&2
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "ensure-system: (faster repeated firmware builds with: $(install_line "${optional[@]}"))" >&2
fi
exit 0
