# flashbox: thin targets; the logic lives in Python modules and scripts/.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Debian packages the tests use (Prometheus and promtool for the monitoring tests, redis-server
# for the shared-state tests: it speaks the protocol Valkey speaks).
DEBS := prometheus redis-server
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv debs demo test test-full test-cli test-docker test-engine engine-cpu lint up down logs bench check-config dashboards device-checks

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,engine-test]'
	@touch $(STAMP)

venv: $(STAMP) ## create the virtualenv with everything the tests and benchmarks need

debs: ## install the Debian packages the tests use, when missing
	@scripts/ensure-debs.sh $(DEBS)

demo: $(STAMP) ## two simulated engine replicas + the gateway on loopback; Ctrl-C stops all
	$(PY) -m scripts.demo

test: $(STAMP) debs ## the test suite (what CI runs)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-full: $(STAMP) debs ## the long suites too (15,000 template cases, soak-sized property runs)
	$(PY) -m pytest -q -m '' $(PYTEST_ARGS)

# Long sessions of the real Claude Code, Codex and opencode CLIs through the gateway over the
# scripted simulator, then the client matrix: the other popular agents and SDKs, each with a
# plain turn, a tool round trip and a second turn (each installed once from npm or PyPI into
# .cache/; skipped without the registry). CI runs it after `make test`; `make test-full`
# includes it.
test-cli: $(STAMP) ## the real agent CLIs and SDKs through the gateway (long sessions; the client matrix)
	$(PY) -m pytest -q -m slow tests/e2e/test_cli_sessions.py tests/e2e/test_client_matrix.py $(PYTEST_ARGS)

# The images built and the compose stack run in Docker: Debian's docker.io and debootstrap
# (installed when missing), a daemon started when none answers, local stand-ins for the images
# registries would give (scripts/docker_stack; the engine's wheels cached under
# .cache/engine-wheels, ~5 GB once). The engine image runs on the CPU with a tiny model
# (docs/deploy.md). CI runs it.
test-docker: $(STAMP) ## build the images and run the compose stack in Docker (sim, fleet and cpu profiles)
	@scripts/ensure-debs.sh docker.io debootstrap
	$(PY) -m scripts.docker_stack
	$(PY) -m pytest -q -s -m docker tests/docker $(PYTEST_ARGS); rc=$$?; \
	  $(PY) -m scripts.docker_stack --stop-daemon; exit $$rc

# The real sglang-kt server on this CPU with a tiny model (docs/engine-cpu.md). Its own
# virtualenv under .cache/engine-cpu (the image's pins; ~10 GB, ~5 min on first use, reused).
ENGINE_CPU_PORT ?= 30000
ENGINE_CPU_MODEL ?= hybrid
export ENGINE_CPU_PORT ENGINE_CPU_MODEL

engine-cpu: ## the real sglang-kt server on this CPU, tiny model (ENGINE_CPU_MODEL hybrid|dense, ENGINE_CPU_PORT); foreground
	$(PYTHON) -m scripts.engine_cpu

# The gateway's engine-generic end-to-end suites over the real server (both tiny models), and
# the wire diff against the simulator. CI runs it after `make test`.
ENGINE_SUITES := tests/e2e/test_engine_protocol.py tests/e2e/test_wire_diff.py tests/engine_cpu
test-engine: $(STAMP) ## the e2e suites over the real sglang-kt server on this CPU (builds its venv once)
	$(PYTHON) -m scripts.engine_cpu --prepare-only --model hybrid
	$(PYTHON) -m scripts.engine_cpu --prepare-only --model dense
	FLASHBOX_TEST_ENGINES=sglang ENGINE_CPU_MODEL=hybrid $(PY) -m pytest -q -p no:cacheprovider $(ENGINE_SUITES) $(PYTEST_ARGS)
	FLASHBOX_TEST_ENGINES=sglang ENGINE_CPU_MODEL=dense $(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_engine_protocol.py $(PYTEST_ARGS)

lint: $(STAMP) ## ruff, mypy --strict, hadolint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@if [ -f Dockerfile ]; then $(VENV)/bin/hadolint Dockerfile; fi

bench: $(STAMP) ## CPU-feasible benchmarks against simulators; report in bench-results/
	$(PY) -m bench all --out bench-results

device-checks: ## on a CUDA host with torch + Triton: the GPU tests, the KDA snapshot check, kernel timings; the image checks when ENGINE_URL (+ GATEWAY_URL) is set
	PYTHON=$${PYTHON:-python3} scripts/device-checks.sh

dashboards: $(STAMP) ## regenerate the committed Grafana dashboard JSON from code
	$(PY) -m monitoring.grafana.generate

check-config: $(STAMP) ## validate compose.yaml for each profile and the engine profiles
	$(VENV)/bin/docker-compose -f compose.yaml --profile sim config -q
	$(VENV)/bin/docker-compose -f compose.yaml --profile gpu config -q
	$(VENV)/bin/docker-compose -f compose.yaml --profile cpu config -q
	$(PY) -m engine.launch --profile config/engine/rtx-pro-6000-epyc.yaml --dry-run

up: ## on a GPU host: engine + gateway + Prometheus + Grafana
	docker compose --profile gpu up -d

down: ## stop whatever `make up` or the sim profile started
	docker compose --profile gpu --profile sim down

logs: ## follow the logs of the running stack
	docker compose --profile gpu --profile sim logs -f --tail=100
