# `make main` and `make test` do all the set-up they need on a fresh machine (a virtual environment in .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup main test lint format clean

setup: $(STAMP)

$(STAMP): pyproject.toml envs/skyrl_wordle/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,sql]" -e envs/skyrl_wordle
	touch $(STAMP)

main: setup
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
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
