"""The policy node running an exported VLA policy over real rclpy: camera images (``sensor_msgs/Image``, or
``sensor_msgs/CompressedImage`` on a ``/compressed`` topic) and joint states in, the instruction as a parameter and
a ``std_msgs/String`` topic, joint commands out; MCAP recordings of such runs, replayed."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from camera_policy import camera_policy
from PIL import Image as PILImage
from ros_harness import ANSWER_S, START_S, NodeProcess, Robot

from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import PolicyController
from rslkit.deploy.ros2.images import image_array
from rslkit.deploy.ros2.recording import McapRecorder, read_recording, recorded_controller_cfg, replay

JOINTS = ["j0", "j1", "j2"]
POSITION, VELOCITY = [0.1, -0.2, 0.3], [0.0, 0.5, 0.0]
CAMERA = "camera/front/image_raw"
COMPRESSED = "camera/front/image_raw/compressed"
RATE = 50.0
pytestmark = pytest.mark.timeout(240)  # a hang guard: the waits inside are bounded on their own
IMAGE = np.random.default_rng(0).integers(0, 256, size=(16, 16, 3), dtype=np.uint8)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """``launch(policy, params) -> (node, robot)`` with camera and instruction publishers; stopped at the end."""
    started: list[tuple[NodeProcess, Robot]] = []

    def _launch(
        policy: Path, params: dict[str, Any], camera: str = CAMERA, instruction: bool = True
    ) -> tuple[NodeProcess, Robot]:
        defaults = {"joint_names": JOINTS, "observation": ["joint_pos", "joint_vel"], "state_queue_depth": 200,
                    "state_timeout_s": 1.0, "image_timeout_s": 1.0}  # fmt: skip
        if camera != CAMERA:
            defaults["camera_topics"] = [f"front={camera}"]
        node = NodeProcess(policy, {**defaults, **params}, tmp_path / f"node{len(started)}.log")
        robot = Robot(image_topics=[camera], instruction_topic="instruction" if instruction else None)
        started.append((node, robot))
        robot.wait_matched(node)
        return node, robot

    yield _launch
    for node, robot in started:
        node.stop(robot)
        robot.close()


def _stream(
    robot: Robot, ticks: int, image: np.ndarray = IMAGE, publish: Callable[[Robot, int], None] | None = None
) -> list[np.ndarray]:
    """Publish an image (``publish(robot, tick)``; default: ``image`` as bgr8) and a joint state every tick at
    50 Hz; returns the commands that answer them (one per state: a run or a hold), waiting for them (at most
    ``ANSWER_S``) rather than for a fixed time a loaded machine can outlast."""
    before = len(robot.commands)

    def state(k: int) -> tuple[list[float], list[float]]:
        if publish is None:
            robot.publish_image(CAMERA, image)  # bgr8, as most camera drivers send
        else:
            publish(robot, k)
        return POSITION, VELOCITY

    robot.stream(JOINTS, ticks, RATE, state)
    robot.spin_until(lambda: len(robot.commands) >= before + ticks, ANSWER_S)
    robot.spin_for(0.05)
    return [c for _, c in robot.commands[before:]]


def _chunk_rows(policy: Path, instruction: str, n: int) -> set[tuple]:
    """Rows of the first ``n`` chunks the node's policy (noise seed 0, one draw per request) makes for the
    streamed observation with ``instruction``, rounded."""
    onnx = OnnxPolicy(policy)
    obs = {"policy": np.float32(POSITION + VELOCITY), "camera_front": IMAGE, "instruction": instruction}
    return {tuple(np.round(r, 6)) for _ in range(n) for r in onnx(obs).astype(np.float64)}


def _key(command: np.ndarray) -> tuple:
    return tuple(np.round(command, 6))


def test_vla_node_follows_images_state_and_instructions(vla_policy: Path, launch: Any) -> None:
    texts = OnnxPolicy(vla_policy).instructions.texts  # type: ignore[union-attr]
    rows = {t: _chunk_rows(vla_policy, t, 300) for t in texts}  # before streaming: no gap in the states later
    node, robot = launch(vla_policy, {"instruction": texts[0]})
    robot.prime(JOINTS, POSITION, VELOCITY)  # no image yet: the node holds the measured position
    assert all(np.allclose(c, POSITION) for _, c in robot.primed_commands)
    first = _stream(robot, 100)
    run = [c for c in first if not np.allclose(c, POSITION)]
    assert len(run) >= 60, node.log()  # the policy ran on most ticks once images arrived
    assert all(_key(c) in rows[texts[0]] for c in run)  # exactly what OnnxPolicy gives for this observation
    # another instruction on the topic: the next chunks follow it (rows saturated at the action bounds can be
    # common to both instructions; most are not)
    robot.publish_instruction(texts[1])
    second = _stream(robot, 60)
    assert all(_key(c) in rows[texts[1]] for c in second[-20:])
    assert sum(_key(c) not in rows[texts[0]] for c in second[-20:]) >= 10
    # an unknown one is ignored: the node keeps following the last instruction it knew
    robot.publish_instruction("fly to the moon")
    third = _stream(robot, 30)
    assert all(_key(c) in rows[texts[1]] for c in third[-20:])
    rc, log = node.stop(robot)
    assert rc == 0
    assert "Ignoring the instruction: Unknown instruction 'fly to the moon'; this policy knows" in log
    assert f"Instruction: '{texts[1]}'." in log
    assert "stale" not in log  # images and states streamed without a gap: no hold after the start


def test_vla_node_refuses_a_wrong_image_size_and_bad_settings(vla_policy: Path, launch: Any, tmp_path: Path) -> None:
    node, robot = launch(vla_policy, {"instruction": "pick up the cube"})
    robot.prime(JOINTS, POSITION, VELOCITY)
    commands = _stream(robot, 40, np.zeros((32, 24, 3), np.uint8))
    assert len(commands) >= 30 and all(np.allclose(c, POSITION) for c in commands)  # held, never ran
    expected = "camera 'front' sends 24x32 images but the policy takes 16x16 (width x height)"
    assert robot.spin_until(lambda: expected in node.log(), ANSWER_S), node.log()
    for params, message in (
        ({"instruction": "fly"}, "Unknown instruction 'fly'; this policy knows ['pick up the cube'"),
        ({"camera_topics": ["side=/side/image"]}, "camera_topics entry 'side=/side/image' must be 'name=topic'"),
    ):
        settings = {"joint_names": JOINTS, "observation": ["joint_pos", "joint_vel"], **params}
        bad = NodeProcess(vla_policy, settings, tmp_path / "bad.log")
        end = time.monotonic() + START_S
        while bad.proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        rc, log = bad.stop()
        assert rc == 2 and message in log, log


def _encode(rgb: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(rgb).save(out, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return out.getvalue()


def _smooth() -> np.ndarray:
    """A gradient 16x16 image: JPEG keeps it within a few levels."""
    y, x = np.mgrid[0:16, 0:16]
    return np.stack([8 * x + 40, 8 * y + 30, 4 * (x + y) + 60], axis=-1).astype(np.uint8)


def _compressed(data: bytes, fmt: str) -> Callable[[Robot, int], None]:
    return lambda robot, k: robot.publish_compressed_image(COMPRESSED, data, fmt)


@pytest.fixture(scope="module")
def step_camera_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A step policy of the joint state and one 16x16 front camera (tests/ros2/camera_policy.py)."""
    return camera_policy(tmp_path_factory.mktemp("camera") / "camera.onnx")


def _run_commands(commands: list[np.ndarray]) -> list[np.ndarray]:
    return [c for c in commands if not np.allclose(c, POSITION)]


def test_compressed_images_give_the_raw_image_commands(step_camera_policy: Path, launch: Any) -> None:
    image = _smooth()
    node, robot = launch(step_camera_policy, {}, instruction=False)
    robot.prime(JOINTS, POSITION, VELOCITY)
    raw = _run_commands(_stream(robot, 40, image))
    assert len(raw) >= 30, node.log()
    expected = OnnxPolicy(step_camera_policy)({"policy": np.float32(POSITION + VELOCITY), "camera_front": image})
    np.testing.assert_allclose(raw[-1], expected, atol=1e-6)  # the command is the policy's action (scale 1)
    node.stop(robot)  # one node at a time: both would answer the joint states
    for fmt, atol in (("PNG", 0.0), ("JPEG", 0.05)):  # PNG: the same pixels; JPEG: close ones
        node, robot = launch(step_camera_policy, {}, camera=COMPRESSED, instruction=False)
        robot.prime(JOINTS, POSITION, VELOCITY)
        label = "jpeg" if fmt == "JPEG" else "png"  # image_transport's format field, informational
        got = _run_commands(_stream(robot, 40, publish=_compressed(_encode(image, fmt), label)))
        assert len(got) >= 30, node.log()
        if atol == 0.0:
            assert all(np.array_equal(c, raw[-1]) for c in got + raw)
        else:
            assert all(np.allclose(c, raw[-1], atol=atol) for c in got) and not np.array_equal(got[-1], raw[-1])
        assert f"camera 'front' from '{COMPRESSED}' (CompressedImage)" in node.log()
        node.stop(robot)


def test_vla_node_takes_png_compressed_images(vla_policy: Path, launch: Any) -> None:
    texts = OnnxPolicy(vla_policy).instructions.texts  # type: ignore[union-attr]
    rows = _chunk_rows(vla_policy, texts[0], 300)
    node, robot = launch(vla_policy, {"instruction": texts[0]}, camera=COMPRESSED)
    robot.prime(JOINTS, POSITION, VELOCITY)
    run = _run_commands(_stream(robot, 80, publish=_compressed(_encode(IMAGE, "PNG"), "rgb8; png compressed bgr8")))
    assert len(run) >= 50, node.log()
    assert all(_key(c) in rows for c in run)  # the raw-image run's commands: rows of the same chunks
    png = _compressed(_encode(IMAGE, "PNG"), "png")
    for data, message in (
        (_encode(IMAGE, "GIF"), "camera 'front': compressed image is GIF; publish JPEG or PNG"),
        (b"garbage", "camera 'front': compressed image of 7 bytes could not be decoded"),
    ):  # each a hold with its reason (logged once per hold), the node lives on and runs again on valid images
        held = _stream(robot, 10, publish=_compressed(data, "jpeg"))
        assert np.allclose(held[-1], held[-2])
        assert robot.spin_until(lambda text=message: text in node.log(), ANSWER_S), node.log()
        again = _run_commands(_stream(robot, 30, publish=png))
        assert len(again) >= 10 and all(_key(c) in rows for c in again[-10:])
    rc, _ = node.stop(robot)
    assert rc == 0


@pytest.mark.parametrize("camera", [CAMERA, COMPRESSED])
def test_recorded_camera_runs_replay_exactly(
    step_camera_policy: Path, launch: Any, tmp_path: Path, camera: str
) -> None:
    path = tmp_path / "camera.mcap"
    node, robot = launch(step_camera_policy, {"record_path": str(path)}, camera=camera, instruction=False)
    robot.prime(JOINTS, POSITION, VELOCITY)
    images = [np.roll(_smooth(), k, axis=1) for k in range(4)]  # the commands change with the image

    def publish(robot: Robot, k: int) -> None:
        image = images[(k // 10) % len(images)]
        if camera == CAMERA:
            robot.publish_image(CAMERA, image)
        elif 25 <= k < 30:  # bad images (a few: best effort may drop one): a hold, recorded and replayed
            robot.publish_compressed_image(COMPRESSED, b"garbage", "jpeg")
        else:
            robot.publish_compressed_image(COMPRESSED, _encode(image, "PNG"), "png")

    commands = _stream(robot, 60, publish=publish)
    rc, log = node.stop(robot)
    assert rc == 0, log
    assert len({_key(c) for c in commands}) >= 4  # the images moved the commands
    meta, messages = read_recording(path)
    recorded = [m for m in messages if m.topic == camera]
    datatype = "sensor_msgs/msg/CompressedImage" if camera == COMPRESSED else "sensor_msgs/msg/Image"
    assert len(recorded) >= 30 and {m.datatype for m in recorded} == {datatype}  # best effort: some may drop
    if camera == CAMERA:  # the raw CDR of what arrived: bgr8 rows
        first = recorded[0].msg
        decoded = image_array(first.encoding, first.height, first.width, first.step, first.data)
        assert any(np.array_equal(decoded, im) for im in images)
    result = replay(path, PolicyController(OnnxPolicy(meta["policy_path"]), recorded_controller_cfg(meta)))
    assert len(result.outputs) == len(result.recorded) >= 60
    assert result.max_difference() == 0.0  # every command, holds included, reproduced exactly
    statuses = [r["status"] for r in result.recorded]
    assert "run" in statuses
    if camera == COMPRESSED:
        assert any("could not be decoded" in r["reason"] for r in result.recorded)


def test_recorded_vla_run_holds_images_and_instructions(vla_policy: Path, launch: Any, tmp_path: Path) -> None:
    texts = OnnxPolicy(vla_policy).instructions.texts  # type: ignore[union-attr]
    path = tmp_path / "vla.mcap"
    node, robot = launch(vla_policy, {"instruction": texts[0], "record_path": str(path)})
    robot.prime(JOINTS, POSITION, VELOCITY)
    _stream(robot, 40)
    robot.publish_instruction(texts[1])
    _stream(robot, 40)
    rc, log = node.stop(robot)
    assert rc == 0, log
    meta, messages = read_recording(path)
    recorded = list(messages)
    images = [m for m in recorded if m.topic == CAMERA]
    assert len(images) >= 70 and all(m.datatype == "sensor_msgs/msg/Image" for m in images)
    m = images[-1].msg
    np.testing.assert_array_equal(image_array(m.encoding, m.height, m.width, m.step, m.data), IMAGE)
    instructions = [(m.time_s, m.msg.data) for m in recorded if m.topic == "instruction"]
    assert [t for _, t in instructions] == [texts[1]] and instructions[0][0] > images[0].time_s
    # replay: the same events into the controller (a chunk policy: which chunk was ready at each tick depends on
    # inference timing, so the statuses and commands are not compared, only that every recorded event replays)
    cfg = recorded_controller_cfg(meta)
    assert cfg.instruction == texts[0]
    controller = PolicyController(OnnxPolicy(meta["policy_path"]), cfg)
    result = replay(path, controller)
    assert len(result.outputs) == len(result.recorded) >= 70
    assert controller.inputs is not None and controller.inputs.instruction == texts[1]
    np.testing.assert_array_equal(controller.inputs.images["front"], IMAGE)


def test_replay_refuses_cameras_the_recording_lacks(step_camera_policy: Path, tmp_path: Path) -> None:
    """A recording without images (a policy without cameras, or one made before images were recorded) cannot feed a
    camera policy: replay says so instead of holding for want of images."""
    path = tmp_path / "no_images.mcap"
    with McapRecorder(path, {"joint_state_topic": "joint_states", "time_base_ns": "0"}):
        pass
    cfg = ControllerCfg(JOINTS, RATE, observation=["joint_pos", "joint_vel"])
    with pytest.raises(ValueError, match=r"reads cameras \['front'\] but .* holds no images of them"):
        replay(path, PolicyController(OnnxPolicy(step_camera_policy), cfg))
