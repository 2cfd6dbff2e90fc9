"""The policy node in actor mode over real rclpy, streaming to a learner stand-in on loopback (private network
namespace): transitions stored once with their keys and next observations, weights swapped at episode ends, and the
control loop on time while the learner is absent or SIGSTOPped."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from learner_stub import LearnerStub, read_keys
from ros_harness import ANSWER_S, START_S, NodeProcess, Robot, _ros_value
from std_msgs.msg import String

from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.synthetic import mlp_policy
from rslkit.link import wire
from rslkit.link.server import LearnerServer
from rslkit.link.sink import MemorySink, TransitionsHandler
from rslkit.link.transitions import TransitionSchema

JOINTS = ["j0", "j1", "j2"]
SCHEMA = TransitionSchema({"policy": wire.ArraySpec((6,), "float32")}, wire.ArraySpec((3,), "float32"))
PARAMS = {
    "joint_names": JOINTS,
    "observation": ["joint_pos", "last_action"],
    "state_reliability": "reliable",
    "state_queue_depth": 200,
    "state_timeout_s": 1.0,
}
DEAD_AFTER_S = 1.2
"""The actor's ``--actor.dead_after_s`` in the timing test: how long a tick that waited on the network would be late."""
pytestmark = pytest.mark.timeout(240)  # a hang guard: the waits inside are bounded on their own


class ActorNodeProcess(NodeProcess):
    """The node with ``--actor.*`` flags before ``--ros-args``."""

    def __init__(self, policy: Path, actor: dict[str, Any], log_path: Path) -> None:
        cmd = [sys.executable, "-m", "rslkit.deploy.ros2", "--policy", str(policy)]
        cmd += [x for k, v in actor.items() for x in (f"--actor.{k}", str(v))] + ["--ros-args"]
        for key, value in PARAMS.items():
            cmd += ["-p", f"{key}:={_ros_value(value)}"]
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=os.environ.copy())


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """``launch(policy, actor_flags) -> (node, robot)``; both are stopped at the end."""
    started: list[tuple[NodeProcess, Robot]] = []

    def _launch(policy: Path, actor: dict[str, Any]) -> tuple[NodeProcess, Robot]:
        node = ActorNodeProcess(policy, actor, tmp_path / f"node{len(started)}.log")
        robot = Robot()
        started.append((node, robot))
        robot.wait_matched(node)
        return node, robot

    yield _launch
    for node, robot in started:
        node.stop(robot)
        robot.close()


def _final_status(log: str) -> dict[str, Any]:
    """The counts the node logs when its actor mode stops."""
    match = re.search(r"Actor mode stopped: (\{.*\})\.", log)
    assert match, log
    return ast.literal_eval(match.group(1))


def _state(k: int) -> tuple[list[float], list[float]]:
    return [0.2 * np.sin(0.05 * k), 0.1, -0.01 * (k % 50)], []


def test_transitions_are_stored_once_and_weights_swap_at_episode_ends(
    policies: dict[str, Path], launch: Any, tmp_path: Path
) -> None:
    new_policy = mlp_policy(tmp_path / "v1.onnx", 6, 3, hidden=(32, 32), control_rate_hz=200.0, seed=7)
    sink = MemorySink()
    server = LearnerServer([TransitionsHandler(SCHEMA, sink)], "127.0.0.1:0")
    try:
        flags = {"learner": server.address, "id": "arm-0", "spool": tmp_path / "spool", "reward": "json"}
        node, robot = launch(policies["mlp3"], {**flags, "max_episode_steps": 25, "drain_s": 10.0})
        reward_pub = robot.node.create_publisher(String, "reward", 10)
        assert robot.spin_until(lambda: reward_pub.get_subscription_count() >= 1, START_S)
        robot.prime(JOINTS, [0.0, 0.1, 0.0])
        weights = {"policy.onnx": np.frombuffer(new_policy.read_bytes(), np.uint8)}

        def state(k: int) -> tuple[list[float], list[float]]:
            if k == 40:  # mid-episode: swapped in at the next episode end
                server.publish_weights(1, weights)
            reward_pub.publish(String(data=json.dumps({"reward": 0.5 * k, "done": k == 90})))  # 90: a termination
            return _state(k)

        robot.stream(JOINTS, 150, 100.0, state)
        assert robot.spin_until(lambda: len(robot.commands) >= 150, ANSWER_S)
        rc, log = node.stop(robot)
        assert rc == 0, log
    finally:
        server.stop(0)
    status = _final_status(log)
    assert status["unacked"] == 0 and status["dropped_buffer_full"] == 0 and status["swaps"] == 1, status
    batches = [b for _, _, b in sink.received]
    assert sink.duplicates == 0 and sink.seqs("arm-0") == list(range(status["spooled"]))  # each once, in order

    def column(name: str) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in batches])

    episode, step, version, done, truncated = (
        column(f) for f in ("episode", "step", "policy_version", "done", "truncated")
    )
    obs, next_obs = (np.concatenate([getattr(b, f)["policy"] for b in batches]) for f in ("obs", "next_obs"))
    action = column("action")
    assert len({(int(e), int(s)) for e, s in zip(episode, step)}) == len(episode) >= 100
    for e in np.unique(episode):
        rows = np.flatnonzero(episode == e)
        assert list(step[rows]) == list(range(len(rows))) and len(set(version[rows])) == 1, f"episode {e}"
    assert set(version) == {0, 1} and (np.diff(version) >= 0).all()
    assert (truncated & (step == 24)).any() and (done & ~truncated).any()  # ends by length and by the topic
    chained = ~done[:-1]
    np.testing.assert_array_equal(next_obs[:-1][chained], obs[1:][chained])  # next obs: the next tick's
    for v, path in ((0, policies["mlp3"]), (1, new_policy)):  # each action is the recorded version's
        rows = version == v
        np.testing.assert_allclose(action[rows], OnnxPolicy(path)(obs[rows]), atol=1e-5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _latencies(robot: Robot, names: list[str], n: int) -> np.ndarray:
    """Stream ``n`` states at 200 Hz; the state -> command latency of each (s), every state answered."""
    before = len(robot.commands)
    sent = robot.stream(names, n, 200.0, _state)
    assert robot.spin_until(lambda: len(robot.commands) >= before + n, ANSWER_S), "states without a command"
    return np.array([t for t, _ in robot.commands[before : before + n]]) - np.array(sent)


def test_ticks_on_time_while_the_learner_is_absent_then_stopped(
    policies: dict[str, Path], launch: Any, tmp_path: Path
) -> None:
    port, keys = _free_port(), tmp_path / "keys.jsonl"
    flags = {"learner": f"127.0.0.1:{port}", "spool": tmp_path / "spool", "reward": "none", "chunk_steps": 20}
    node, robot = launch(policies["mlp3"], {**flags, "dead_after_s": DEAD_AFTER_S, "drain_s": 10.0})
    robot.prime(JOINTS, [0.0, 0.1, 0.0], settle_s=0.3)  # no late priming answer among the timed commands
    absent = _latencies(robot, JOINTS, 200)  # nobody listens on the port
    learner = LearnerStub(SCHEMA, port, out=keys)
    try:
        connected = _latencies(robot, JOINTS, 300)
        assert robot.spin_until(lambda: keys.exists() and keys.stat().st_size > 0, START_S), node.log()
        learner.signal(signal.SIGSTOP)  # alive to the kernel, silent to the actor
        stopped = _latencies(robot, JOINTS, 600)  # 3 s: longer than DEAD_AFTER_S, so the client gives up meanwhile
        learner.signal(signal.SIGCONT)
        resumed = _latencies(robot, JOINTS, 200)
        rc, log = node.stop(robot)
        assert rc == 0, log
    finally:
        learner.kill()
    status = _final_status(log)
    assert status["unacked"] == 0 and status["dropped_buffer_full"] == 0, status
    stored = read_keys(keys)
    assert len(stored) == len({(e, s) for _, e, s, _ in stored}) == status["spooled"]  # each once, none lost
    # a tick that waited on the network would be late by the DEAD_AFTER_S the client needs to give up a silent
    # learner; the bounds sit well below it and well above what a loaded machine adds (0.33 s of queueing seen with
    # five other test jobs on two cores)
    for name, lat in (("absent", absent), ("connected", connected), ("stopped", stopped), ("resumed", resumed)):
        assert lat.max() < DEAD_AFTER_S / 2, f"learner {name}: slowest state -> command {lat.max() * 1e3:.1f} ms"
    assert status["hook_max_ms"] < DEAD_AFTER_S * 1e3 / 4, status  # the actor's work in a tick, network excluded


def test_actor_flags_without_a_learner_are_refused(policies: dict[str, Path]) -> None:
    cmd = [sys.executable, "-m", "rslkit.deploy.ros2", "--policy", str(policies["mlp3"]), "--actor.id", "x"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=START_S)
    assert proc.returncode == 2 and "--actor.id need --actor.learner HOST:PORT" in proc.stderr, proc.stderr
