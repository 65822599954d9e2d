# The README's two commands: `make demo` (the main job, end to end) and `make test` (everything, what CI runs);
# `make check` is the quick tier for a change: lint, types, the size rule, unit and firmware-core tests, no Docker.
# Each target creates/refreshes .venv itself and runs as whoever calls make: nothing here needs root.
# As root on Debian the ensure-* scripts install what is missing; as anyone else they install nothing,
# print the exact commands (packages, the docker group) and stop only when the target needs them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TESTBED := $(BIN)/testbed
PYTEST_ARGS ?=
ifeq ($(CI),true)
PYTEST_ARGS += --require-docker
endif
DEMO_ARGS ?=
# make check: the tests that need no Docker, no root (network namespaces) and are not marked slow (tests/conftest.py)
CHECK_MARKERS := not docker and not netns and not slow
CHECK_ARGS ?=

.PHONY: demo test check images lint venv system system-demo system-check docker firmware-host clean release

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing the package and its dependencies into $(VENV) (log: $(VENV)/pip.log)"
	@$(BIN)/pip install -q --upgrade pip wheel setuptools > $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	@$(BIN)/pip install -q -e '.[dev,esp32]' >> $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	$(BIN)/python -c "import orchestrator, typer, pydantic, pandas, paho.mqtt, ansible_runner"
	@touch $@

# host packages: `system` is what make test needs, `system-demo` what make demo needs (a subset)
system:
	@bash scripts/ensure-system.sh test

system-demo:
	@bash scripts/ensure-system.sh demo

system-check:
	@bash scripts/ensure-system.sh check

docker: venv
	@bash scripts/ensure-docker.sh $(VENV)

images: venv system-demo docker
	$(TESTBED) images build

# `testbed demo` itself reuses or builds the images; `images` first installs what building them needs
demo: images
	$(TESTBED) demo $(DEMO_ARGS)

# the sdist, the wheel built from it (dist/), and twine's check of both (CHANGELOG.md)
release: venv
	@$(BIN)/python -c "import build, twine" 2>/dev/null || $(BIN)/pip install -q -e '.[release]'
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# The tests in three pytest lanes (scripts/test-lanes.sh): the docker tests (real containers; mostly waiting on
# messages sent at their interval) in the foreground, first the ones that need the engine alone (the fault suite),
# then the rest; beside them the tests without Docker (unit, firmware-core builds, network namespaces) niced so that
# the containers' timing comes first, then a second docker lane (tests/conftest.py SECOND_LANE) as its own user.
# Each ends with its slowest tests (--durations), where CI's minutes go; the target fails when any fails (5, no
# tests, is a failure too), and Ctrl-C stops them all. `make lint` (ruff, mypy, the size rule) comes first: a lint
# or type error fails `make test` before anything is installed or built. Under CI=true a skip that tests/skips.py
# does not allow fails the run (tests/conftest.py).
test: lint system docker images
	@bash scripts/test-lanes.sh $(BIN) $(PYTEST_ARGS)

# two pytest processes, one per core: tests/firmware (mostly C++ builds, from ccache after the first run) in the
# background with CHECK_BESIDE, the unit tests that even the two out (warm, here: 2:00 + 0:36 beside 3:03 - 0:36),
# its output shown after tests/unit's; the target fails when either does
CHECK_BESIDE := tests/unit/report/test_report_build.py tests/unit/report/test_report_layout.py
check: lint system-check
	@mkdir -p build
	@echo "pytest -m '$(CHECK_MARKERS)' tests/unit, and tests/firmware beside it (log: build/check-firmware.log)"
	@$(BIN)/pytest -q -m "$(CHECK_MARKERS)" tests/firmware $(CHECK_BESIDE) $(CHECK_ARGS) > build/check-firmware.log 2>&1 & fw=$$!; \
	$(BIN)/pytest -q -m "$(CHECK_MARKERS)" tests/unit $(addprefix --ignore=,$(CHECK_BESIDE)) $(CHECK_ARGS); unit=$$?; \
	wait $$fw; firmware=$$?; echo "== tests/firmware (build/check-firmware.log)"; cat build/check-firmware.log; \
	echo "make check: tests/unit exit $$unit, tests/firmware exit $$firmware"; exit $$(( unit || firmware ))

lint: venv
	$(BIN)/ruff check orchestrator tests bench scripts
	$(BIN)/mypy orchestrator scripts/size_lint.py
	$(BIN)/python scripts/size_lint.py

clean:
	-$(TESTBED) down
	rm -rf .cache/wheelhouse .testbed build
