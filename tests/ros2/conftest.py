"""ROS 2 tests: real rclpy (PyPI Jazzy wheels) in .venv-ros, run by `make test` inside a private network namespace.

They need rclpy, which lives in its own virtual environment (.venv-ros) because its wheels re-exec every Python
start. In the main .venv these files are not collected (explicitly, below). With RSLKIT_ROS_TESTS=1 (set by the
Makefile) a missing rclpy or a network that is not an isolated loopback is an error instead, so a broken set-up
can never pass silently.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
from pathlib import Path

import pytest

REQUIRED = os.environ.get("RSLKIT_ROS_TESTS") == "1"
ROOT = Path(__file__).resolve().parents[2]
MAIN_PYTHON = ROOT / ".venv" / "bin" / "python"
"""The training venv (torch): it exports the VLA policy the node runs."""
HAVE_RCLPY = importlib.util.find_spec("rclpy") is not None

if not HAVE_RCLPY:
    if REQUIRED:
        raise RuntimeError("RSLKIT_ROS_TESTS=1 but rclpy is not importable; run the ROS tests with .venv-ros.")
    collect_ignore_glob = ["test_*.py"]  # main .venv: rclpy lives in .venv-ros (make test runs these there)


def _interfaces() -> set[str]:
    """Network interfaces of this process's namespace (/sys/class/net may show the host's)."""
    return {name for _, name in socket.if_nameindex()}


if REQUIRED:
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        raise RuntimeError("Set ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST for the ROS tests (make test does).")
    if _interfaces() != {"lo"}:
        raise RuntimeError(
            f"The ROS tests must run in a private network namespace (interfaces: {sorted(_interfaces())}); use "
            "`make test`, which runs them under `unshare -n`."
        )


def pytest_configure(config: pytest.Config) -> None:
    # rosidl's parser imports lark, which imports the deprecated sre_parse / sre_constants
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:lark.utils")


@pytest.fixture(scope="session")
def policies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small ONNX policies built with the onnx helper API (the ROS venv has no torch)."""
    from rslkit.deploy.ros2.synthetic import chunk_policy, mlp_policy

    d = tmp_path_factory.mktemp("policies")
    return {
        # 3 joints, observation joint_pos + last_action (6)
        "mlp3": mlp_policy(d / "mlp3.onnx", 6, 3, hidden=(32, 32), control_rate_hz=200.0, seed=1),
        # the same network with joint names in its metadata, as an exported robot task has them
        "mlp3_named": mlp_policy(
            d / "mlp3_named.onnx", 6, 3, hidden=(32, 32), control_rate_hz=200.0, seed=1, joint_names=["j0", "j1", "j2"]
        ),
        # 3 joints, observation joint_pos + command (1): NaN while the command is negative
        "nan3": mlp_policy(d / "nan3.onnx", 4, 3, hidden=(16,), control_rate_hz=100.0, nan_when_negative=3),
        # 3 joints, chunk of 8, observation joint_pos + joint_vel (6)
        "chunk3": chunk_policy(d / "chunk3.onnx", 6, 3, 8, hidden=(32,), control_rate_hz=200.0, seed=2),
    }


@pytest.fixture(scope="session")
def vla_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny VLA policy exported by rslkit (``export_vla.py``, run with the main venv: the ROS venv has no torch)."""
    if not MAIN_PYTHON.exists():
        message = f"The VLA node tests export their policy with {MAIN_PYTHON}; run `make .venv/.installed` first."
        if REQUIRED:
            raise RuntimeError(message)
        pytest.skip(message)
    out = tmp_path_factory.mktemp("vla") / "vla.onnx"
    # without the ROS wheels' library path: the main venv loads its own libraries
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE")}
    script = Path(__file__).with_name("export_vla.py")
    done = subprocess.run([str(MAIN_PYTHON), str(script), str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"Exporting the VLA test policy failed:\n{done.stdout}\n{done.stderr}")
    return out
