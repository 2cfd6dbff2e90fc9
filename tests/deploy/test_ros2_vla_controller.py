"""The ROS controller (no ROS) running an exported VLA policy: camera images from ``sensor_msgs/Image`` fields, the
instruction looked up in the exported table, and holds that name what is missing or wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rslkit.deploy.clock import FakeClock
from rslkit.deploy.export import export_policy
from rslkit.deploy.inference_worker import InferenceRequest, SimulatedInference
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.actor import ActorMode
from rslkit.deploy.ros2.actor_rewards import NoReward
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import ControlOutput, PolicyController
from rslkit.deploy.ros2.images import image_array
from tests.deploy.test_vla_export import _policy

J = ["j0", "j1", "j2"]
TEXTS = ["pick up the cube", "push the cube left"]
RATE = 50.0


@pytest.fixture(scope="module")
def vla(tmp_path_factory) -> Path:
    """Cameras front and wrist 16x16, instruction embedding 8, state joint_pos + joint_vel (6), 3 actions."""
    rng = np.random.default_rng(4)
    path = tmp_path_factory.mktemp("vla") / "vla.onnx"
    export_policy(_policy(), path, "vla-bc", instructions={t: rng.normal(size=8) for t in TEXTS})
    return path


def _images(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8) for c in ("front", "wrist")}


class Recorded(SimulatedInference):
    """Simulated inference that keeps the requests it was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[InferenceRequest] = []

    def submit(self, request: InferenceRequest) -> None:
        self.requests.append(request)
        super().submit(request)


def _controller(path: Path, **cfg: Any) -> tuple[PolicyController, FakeClock, list[Recorded]]:
    clock, made = FakeClock(), []

    def factory(fn: Any, c: Any) -> Recorded:
        made.append(Recorded(fn, c, lambda request: 0.02))
        return made[-1]

    settings = dict(observation=["joint_pos", "joint_vel"], chunk_initial_latency_s=0.02, instruction=TEXTS[0])
    ctrl = PolicyController(
        OnnxPolicy(path), ControllerCfg(J, RATE, **{**settings, **cfg}), clock=clock, inference_factory=factory
    )
    return ctrl, clock, made


def _send_images(ctrl: PolicyController, now: float, images: dict[str, np.ndarray], bgr: bool = True) -> None:
    for cam, rgb in images.items():  # as a camera driver publishes them: bgr8, rows padded to 64 bytes
        pixels = rgb[..., ::-1] if bgr else rgb
        rows = np.zeros((16, 64), np.uint8)
        rows[:, :48] = pixels.reshape(16, 48)
        ctrl.on_image(now, cam, "bgr8" if bgr else "rgb8", 16, 16, 64, rows.tobytes())


def _run(ctrl: PolicyController, clock: FakeClock, ticks: int, images: dict[str, np.ndarray], start: int = 0) -> list:
    outs: list[ControlOutput | None] = []
    for k in range(start, start + ticks):
        now = k / RATE
        clock.sleep_until(now)
        _send_images(ctrl, now, images)
        outs.append(ctrl.on_joint_state(now, J, [0.1, -0.2, 0.3], [0.0, 0.5, 0.0]))
    return outs


def _rows(path: Path, obs: dict[str, Any], n: int) -> set[tuple]:
    """Rows of the first ``n`` chunks the node's policy (seed 0) makes for ``obs``, rounded."""
    policy = OnnxPolicy(path)
    return {tuple(np.round(r, 6)) for _ in range(n) for r in policy(obs).astype(np.float64)}


def test_images_state_and_instruction_drive_the_policy(vla: Path) -> None:
    ctrl, clock, made = _controller(vla)
    images = _images()
    outs = _run(ctrl, clock, 20, images)
    assert outs[0].status == "startup"  # type: ignore[union-attr]
    assert all(o.status == "run" for o in outs[1:])  # type: ignore[union-attr]  # d = 20 ms = 1 tick
    sent = made[0].requests[0].obs
    for cam, rgb in images.items():  # bgr8 with padded rows arrives as the RGB image
        np.testing.assert_array_equal(sent[f"camera_{cam}"], rgb)
    np.testing.assert_array_equal(sent["policy"], np.float32([0.1, -0.2, 0.3, 0.0, 0.5, 0.0]))
    assert sent["instruction"] == TEXTS[0]
    obs = {"policy": sent["policy"], "instruction": TEXTS[0], **{f"camera_{c}": v for c, v in images.items()}}
    rows = _rows(vla, obs, len(made[0].requests))
    assert all(tuple(np.round(o.positions, 6)) in rows for o in outs[1:])  # type: ignore[union-attr]
    # a new instruction: the next chunks follow it
    assert ctrl.on_instruction(0.5, TEXTS[1])
    outs = _run(ctrl, clock, 10, images, start=20)
    assert made[0].requests[-1].obs["instruction"] == TEXTS[1]
    other = _rows(vla, {**obs, "instruction": TEXTS[1]}, len(made[0].requests))
    assert tuple(np.round(outs[-1].positions, 6)) in other - rows  # type: ignore[union-attr]


def test_unknown_instructions_are_refused_at_start_and_ignored_at_run_time(vla: Path, caplog) -> None:
    with pytest.raises(ValueError, match=r"Unknown instruction 'fly'.*pick up the cube.*--instructions"):
        _controller(vla, instruction="fly")
    ctrl, clock, made = _controller(vla, instruction="")
    outs = _run(ctrl, clock, 3, _images())
    assert all(o.status == "hold" and "no instruction" in o.reason for o in outs)  # type: ignore[union-attr]
    assert "push the cube left" in outs[0].reason  # type: ignore[union-attr]
    assert not ctrl.on_instruction(0.1, "fly") and ctrl.counts["ignored_instructions"] == 1
    assert "Unknown instruction 'fly'" in caplog.text
    assert ctrl.on_instruction(0.1, TEXTS[1])
    outs = _run(ctrl, clock, 6, _images(), start=3)
    assert outs[-1].status == "run" and made[-1].requests[-1].obs["instruction"] == TEXTS[1]  # type: ignore[union-attr]
    assert not ctrl.on_instruction(0.3, "fly") and made[-1].requests[-1].obs["instruction"] == TEXTS[1]


def test_missing_wrong_and_stale_images_hold_with_the_reason(vla: Path) -> None:
    ctrl, clock, _ = _controller(vla)
    out = ctrl.on_joint_state(0.0, J, [0.1, -0.2, 0.3], [0.0, 0.0, 0.0])
    assert out is not None and out.status == "hold" and "no image from camera 'front' yet" in out.reason
    np.testing.assert_array_equal(out.positions, [0.1, -0.2, 0.3])  # holds the measured position
    big = np.zeros((32, 24, 3), np.uint8)
    ctrl.on_image(0.01, "front", "rgb8", 32, 24, 72, big.tobytes())
    _send_images(ctrl, 0.01, {"wrist": _images()["wrist"]})
    out = ctrl.on_joint_state(0.02, J, [0.1, -0.2, 0.3], [0.0, 0.0, 0.0])
    assert out is not None and out.status == "hold"
    assert "camera 'front' sends 24x32 images but the policy takes 16x16 (width x height)" in out.reason
    ctrl.on_image(0.03, "front", "mono8", 16, 16, 16, bytes(256))
    out = ctrl.on_joint_state(0.04, J, [0.1, -0.2, 0.3], [0.0, 0.0, 0.0])
    assert out is not None and "encoding 'mono8' is not supported; publish rgb8 or bgr8" in out.reason
    outs = _run(ctrl, clock, 10, _images(), start=3)  # valid images: it runs
    assert outs[-1].status == "run"  # type: ignore[union-attr]
    now = 12 / RATE + 0.6  # states keep coming, images stop for longer than image_timeout_s (0.5 s)
    clock.sleep_until(now)
    out = ctrl.on_joint_state(now, J, [0.1, -0.2, 0.3], [0.0, 0.0, 0.0])
    assert out is not None and out.status == "hold" and "camera 'front' image is stale" in out.reason
    assert ctrl.counts["hold:no_image"] == 2 and ctrl.counts["hold:bad_image"] == 2
    with pytest.raises(ValueError, match=r"no camera 'side'; its cameras are \['front', 'wrist'\]"):
        ctrl.on_image(now, "side", "rgb8", 16, 16, 48, bytes(768))


def test_image_fields_are_checked() -> None:
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    np.testing.assert_array_equal(image_array("rgb8", 2, 3, 9, rgb.tobytes()), rgb)
    np.testing.assert_array_equal(image_array("bgr8", 2, 3, 9, rgb[..., ::-1].tobytes()), rgb)
    with pytest.raises(ValueError, match="17 bytes; a valid image has step >= 9 and step \\* height = 18"):
        image_array("rgb8", 2, 3, 9, bytes(17))
    with pytest.raises(ValueError, match="step >= 9"):
        image_array("rgb8", 2, 3, 8, bytes(18))


def test_actor_mode_and_other_multi_group_policies_are_refused(vla: Path, tmp_path: Path) -> None:
    ctrl, _, _ = _controller(vla)
    with pytest.raises(ValueError, match="Actor mode records one float observation group"):
        ActorMode(ctrl, lambda rows: True, NoReward())
    export_policy(_policy(cameras=()), tmp_path / "no_cam.onnx", "vla-bc")  # state + instruction: still a VLA
    assert PolicyController(OnnxPolicy(tmp_path / "no_cam.onnx"), ControllerCfg(J, RATE, observation=["joint_pos",
                            "joint_vel"])).inputs is not None  # fmt: skip
