# One-command set-up: `make train` and `make test` create .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
TASK ?= pendulum
ARGS ?=

.PHONY: train test lint bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU wheel first (on disk); a GPU user keeps their own torch build (pyproject says torch>=2.4).
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $@

train: $(VENV)/.installed
	$(PY) train.py --task $(TASK) $(ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

lint: $(VENV)/.installed
	$(PY) -m ruff check rslkit tests train.py play.py benchmarks examples
	$(PY) -m ruff format --check rslkit tests train.py play.py benchmarks examples
	$(PY) -m mypy

bench: $(VENV)/.installed
	$(PY) benchmarks/ppo_vs_rsl_rl.py

clean:
	rm -rf $(VENV) logs
