#!/usr/bin/env bash
# make test's pytest runs: the docker tests in two lanes, the tests without Docker beside them.
#
#   foreground  lane 1: the exclusive docker tests (tests/conftest.py EXCLUSIVE: the fault suite restarts dockerd
#               and freezes containers, test_doctor_as_user untags an image, and the tests that time this machine),
#               before lane 2 starts; then every other docker test but the second lane's
#   background  the tests without Docker (unit, firmware-core builds, network namespaces) under nice -n 10, then,
#               once lane 1's exclusive part is over, lane 2: the SECOND_LANE files as their own user
#               (testbed-userb), under nice -n 5
#
# Each pytest prints its slowest tests (--durations), where CI's minutes go; the background's output is kept in
# build/test-nodocker.log and build/test-docker2.log and shown at the end. Exit status: non-zero when any pytest
# failed (5, no tests collected, is a failure too). Ctrl-C stops everything. Usage: test-lanes.sh BIN [PYTEST_ARGS...]
set -u
bin=$1
shift
mkdir -p build
flag=build/.exclusive-done
rm -f "$flag"
exclusive=$("$bin/python" -c 'import sys; sys.path[:0] = ["tests", "."]; import conftest; print(*conftest.EXCLUSIVE)')

(
  nice -n 10 "$bin/python" scripts/sigint-default.py "$bin/pytest" --durations=40 -m "not docker" "$@" \
    > build/test-nodocker.log 2>&1
  echo $? > build/.nodocker-exit
  while [ ! -e "$flag" ]; do sleep 1; done
  TESTBED_TEST_USER=testbed-userb nice -n 5 "$bin/python" scripts/sigint-default.py "$bin/pytest" --durations=10 \
    -m "docker and second_lane" "$@" tests/integration > build/test-docker2.log 2>&1
  echo $? > build/.docker2-exit
) &
beside=$!
# Ctrl-C reaches every pytest (scripts/sigint-default.py gives the background ones theirs back); the background
# subshell, which a shell's & leaves deaf to it, is stopped here with its children, and nothing more starts
trap 'touch "$flag"; pkill -TERM -P $beside 2>/dev/null; kill $beside 2>/dev/null; exit 130' INT TERM

echo "pytest lane 1: the exclusive docker tests ($exclusive), then the rest of lane 1"
echo "beside it: pytest -m 'not docker' (build/test-nodocker.log), then lane 2 (build/test-docker2.log)"
# shellcheck disable=SC2086
"$bin/pytest" --durations=10 -m docker "$@" $exclusive
first=$?
touch "$flag"
ignore=()
for path in $exclusive; do ignore+=("--ignore=$path"); done
"$bin/pytest" --durations=25 -m "docker and not second_lane" "$@" "${ignore[@]}" tests/integration
rest=$?
wait $beside
nodocker=$(cat build/.nodocker-exit 2>/dev/null || echo 1)
second=$(cat build/.docker2-exit 2>/dev/null || echo 1)
echo "== not docker (build/test-nodocker.log)"
cat build/test-nodocker.log
echo "== docker, lane 2 (build/test-docker2.log)"
cat build/test-docker2.log
echo "make test: docker exclusive exit $first, docker lane 1 exit $rest, docker lane 2 exit $second, not docker exit $nodocker"
exit $(( first || rest || second || nodocker ))
