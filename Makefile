# The README's two commands: `make demo` (the main job, end to end) and `make test`.
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
DEMO_ARGS ?= --payloads 65,100 --samples 200

.PHONY: demo test images lint venv system system-demo docker firmware-host clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
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

docker: venv
	@bash scripts/ensure-docker.sh $(VENV)

images: venv system-demo docker
	$(TESTBED) images build

demo: images
	$(TESTBED) sweep $(DEMO_ARGS)

test: venv system docker images
	$(BIN)/pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check orchestrator tests bench
	$(BIN)/mypy orchestrator

clean:
	-$(TESTBED) down
	rm -rf .cache/wheelhouse .testbed build
