"""The policy node running an exported VLA policy over real rclpy: camera images (``sensor_msgs/Image``) and joint
states in, the instruction as a parameter and a ``std_msgs/String`` topic, joint commands out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros_harness import NodeProcess, Robot

from rslkit.deploy.onnx_policy import OnnxPolicy

JOINTS = ["j0", "j1", "j2"]
POSITION, VELOCITY = [0.1, -0.2, 0.3], [0.0, 0.5, 0.0]
CAMERA = "camera/front/image_raw"
RATE = 50.0
pytestmark = pytest.mark.timeout(90)
IMAGE = np.random.default_rng(0).integers(0, 256, size=(16, 16, 3), dtype=np.uint8)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """``launch(policy, params) -> (node, robot)`` with camera and instruction publishers; stopped at the end."""
    started: list[tuple[NodeProcess, Robot]] = []

    def _launch(policy: Path, params: dict[str, Any]) -> tuple[NodeProcess, Robot]:
        defaults = {"joint_names": JOINTS, "observation": ["joint_pos", "joint_vel"], "state_queue_depth": 200,
                    "state_timeout_s": 1.0, "image_timeout_s": 1.0}  # fmt: skip
        node = NodeProcess(policy, {**defaults, **params}, tmp_path / f"node{len(started)}.log")
        robot = Robot(image_topics=[CAMERA], instruction_topic="instruction")
        started.append((node, robot))
        robot.wait_matched(node)
        return node, robot

    yield _launch
    for node, robot in started:
        node.stop(robot)
        robot.close()


def _stream(robot: Robot, ticks: int, image: np.ndarray = IMAGE) -> list[np.ndarray]:
    """Publish an image and a joint state every tick at 50 Hz; returns the commands that came back meanwhile."""
    before = len(robot.commands)

    def state(k: int) -> tuple[list[float], list[float]]:
        robot.publish_image(CAMERA, image)  # bgr8, as most camera drivers send
        return POSITION, VELOCITY

    robot.stream(JOINTS, ticks, RATE, state)
    robot.spin_for(0.2)
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
    assert expected in node.log()
    for params, message in (
        ({"instruction": "fly"}, "Unknown instruction 'fly'; this policy knows ['pick up the cube'"),
        ({"record_path": str(tmp_path / "r.mcap")}, "Recording a policy with camera inputs is not supported yet"),
        ({"camera_topics": ["side=/side/image"]}, "camera_topics entry 'side=/side/image' must be 'name=topic'"),
    ):
        settings = {"joint_names": JOINTS, "observation": ["joint_pos", "joint_vel"], **params}
        bad = NodeProcess(vla_policy, settings, tmp_path / "bad.log")
        end = time.monotonic() + 30
        while bad.proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        rc, log = bad.stop()
        assert rc == 2 and message in log, log
