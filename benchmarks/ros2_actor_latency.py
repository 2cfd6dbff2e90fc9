"""State -> command latency of the ROS 2 policy node in actor mode, against a bare rclpy + ONNX Runtime loop.

Three loops drive the same policy at 200 Hz, each in its own process, answering a scripted rclpy robot (this
process, the harness of ``benchmarks/ros2_latency.py`` and the ROS tests) in one private network namespace:

* ``bare``: subscribe ``sensor_msgs/JointState`` -> concatenate positions, velocities and the last action -> one
  ONNX Runtime session run (1 thread) -> publish ``std_msgs/Float64MultiArray``. Nothing else: no joint
  reordering, checks, limits or watchdog.
* ``node``: ``python -m rslkit.deploy.ros2`` with its defaults (actor mode off).
* ``node+actor``: the same with ``--actor.learner``: every tick recorded, spooled once per episode (200 steps, an
  fsync each) and streamed over gRPC to a learner stand-in process (``tests/ros2/learner_stub.py``: a
  ``LearnerServer`` with a ``MemorySink``) that pushes the policy as a new weights version every 2 s, so weights
  are decoded, loaded and swapped in at episode ends during the run.

Policy: ``mlp``, 12 joints, observation joint_pos_rel + joint_vel + last_action (36) -> 512, 256, 128 -> 12 (random
weights, built with the onnx helper API). Every loop uses a reliable state subscription of depth 10 (the node's
default). Latency = command arrival - state send on this process's ``time.perf_counter`` (DDS both ways, the loop,
this process's executor). Runs alternate between the loops, ``--rounds`` rounds of ``--ticks`` ticks each.

Needs the ROS venv: ``.venv-ros/bin/python benchmarks/ros2_actor_latency.py`` (re-runs itself under ``unshare -n``
with loopback only). Writes ``benchmarks/results/ros2_actor_latency.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "ros2"))  # the scripted robot and the learner stand-in of the ROS tests

from _common import cpu_model, print_table, write_results  # noqa: E402
from ros2_latency import _isolate  # noqa: E402

RATE_HZ = 200.0
JOINTS = 12
NODE_PARAMS = {"observation": ["joint_pos_rel", "joint_vel", "last_action"], "state_timeout_s": 5.0}
GOAL_RATIO = 1.3


# ---------------------------------------------------------------------------------------------- the bare loop
def bare_loop(policy: str) -> None:
    """JointState -> ONNX Runtime -> Float64MultiArray, until SIGINT (run as ``--bare POLICY``)."""
    import onnxruntime as ort
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(policy, options, providers=["CPUExecutionProvider"])
    rclpy.init()
    node = rclpy.create_node("bare_onnx_loop")
    pub = node.create_publisher(Float64MultiArray, "joint_commands", 10)
    last = np.zeros(JOINTS, np.float32)

    def on_state(msg: JointState) -> None:
        nonlocal last
        obs = np.concatenate([np.asarray(msg.position, np.float32), np.asarray(msg.velocity, np.float32), last])
        last = session.run(["actions"], {"policy": obs[None]})[0][0]
        pub.publish(Float64MultiArray(data=[float(x) for x in last]))

    node.create_subscription(
        JointState, "joint_states", on_state, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    )
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        rclpy.try_shutdown()


# ---------------------------------------------------------------------------------------------- processes
def _node_process(
    kind: str, policy: Path, tmp: Path, run: str, learner_port: int | None, episode_steps: int = 200
) -> Any:
    """The loop ``kind`` as a child process with the ``NodeProcess`` interface of the ROS test harness."""
    from ros_harness import NodeProcess, _ros_value

    class LoopProcess(NodeProcess):
        def __init__(self, cmd: list[str], log_path: Path) -> None:
            self.log_path = log_path
            self._log = open(log_path, "w")  # noqa: SIM115 - closed by NodeProcess.stop
            self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=os.environ.copy())

    params = {"joint_names": [f"joint{i}" for i in range(JOINTS)], **NODE_PARAMS}
    if kind == "bare":
        return LoopProcess([sys.executable, str(Path(__file__).resolve()), "--bare", str(policy)], tmp / f"{run}.log")
    cmd = [sys.executable, "-m", "rslkit.deploy.ros2", "--policy", str(policy)]
    if kind == "node+actor":
        actor = {
            "learner": f"127.0.0.1:{learner_port}",
            "spool": tmp / f"{run}-spool",
            "reward": "none",
            "max_episode_steps": episode_steps,
            "drain_s": 5.0,
        }
        cmd += [x for k, v in actor.items() for x in (f"--actor.{k}", str(v))]
    cmd += ["--ros-args"] + [x for k, v in params.items() for x in ("-p", f"{k}:={_ros_value(v)}")]
    return LoopProcess(cmd, tmp / f"{run}.log")


def _run(
    kind: str, policy: Path, ticks: int, tmp: Path, run: str, push_s: float = 2.0, episode_steps: int = 200
) -> dict[str, Any]:
    from learner_stub import LearnerStub
    from ros_harness import Robot

    from rslkit.link import wire
    from rslkit.link.transitions import TransitionSchema

    names = [f"joint{i}" for i in range(JOINTS)]
    learner = None
    if kind == "node+actor":
        schema = TransitionSchema(
            {"policy": wire.ArraySpec((3 * JOINTS,), "float32")}, wire.ArraySpec((JOINTS,), "float32")
        )
        learner = LearnerStub(schema, weights=policy if push_s > 0 else None, push_s=push_s)
    node = _node_process(kind, policy, tmp, run, learner.port if learner else None, episode_steps)
    robot = Robot()
    try:
        robot.wait_matched(node)
        robot.prime(names, [0.0] * JOINTS, [0.0] * JOINTS)
        states = 0.1 * np.random.default_rng(0).standard_normal((ticks, JOINTS))
        sent = np.asarray(robot.stream(names, ticks, RATE_HZ, lambda k: (states[k], np.zeros(JOINTS))))
        robot.spin_until(lambda: len(robot.commands) >= ticks, 2.0)
        robot.spin_for(0.05)
        arrived = np.asarray([t for t, _ in robot.commands])
        _, log = node.stop(robot)
    finally:
        if node.proc.poll() is None:
            node.stop(robot)
        robot.close()
        if learner is not None:
            learner.kill()
    if len(arrived) >= ticks:  # one command per state, in order (the node's final hold comes after)
        latency = arrived[:ticks] - sent
    else:  # pair each command with the newest state sent before it
        idx = np.searchsorted(sent, arrived) - 1
        latency = arrived[idx >= 0] - sent[idx[idx >= 0]]
    ms = latency * 1e3
    result = {
        "ticks": ticks,
        "lost": max(0, ticks - len(arrived)),
        "median_ms": float(np.median(ms)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
    }
    match = re.search(r"Actor mode stopped: (\{.*\})\.", log)
    if match:
        result["actor"] = ast.literal_eval(match.group(1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=2000, help="states per run (200 Hz)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per loop")
    parser.add_argument("--push-s", type=float, default=2.0, help="the learner pushes weights this often (0: never)")
    parser.add_argument("--episode-steps", type=int, default=200, help="--actor.max_episode_steps")
    parser.add_argument(
        "--out", default=None, help="results JSON (default: benchmarks/results/ros2_actor_latency.json)"
    )
    parser.add_argument("--bare", default=None, help=argparse.SUPPRESS)  # the bare loop's child process
    args = parser.parse_args()
    if args.bare:
        bare_loop(args.bare)
        return
    _isolate([str(Path(__file__).resolve()), *sys.argv[1:]])
    from rslkit.deploy.ros2.synthetic import mlp_policy

    load = [round(x, 2) for x in os.getloadavg()]
    kinds = ("bare", "node", "node+actor")
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        policy = mlp_policy(Path(tmp) / "mlp.onnx", 3 * JOINTS, JOINTS, hidden=(512, 256, 128), control_rate_hz=RATE_HZ)
        for r in range(args.rounds):
            for kind in kinds:
                result = _run(kind, policy, args.ticks, Path(tmp), f"{kind}-{r}", args.push_s, args.episode_steps)
                runs[kind].append(result)
                print(f"round {r} {kind}: {result}", flush=True)
    summary = {}
    for kind, results in runs.items():
        summary[kind] = {
            "median_ms": float(np.median([x["median_ms"] for x in results])),
            "p99_ms": float(np.median([x["p99_ms"] for x in results])),
            "max_ms": float(max(x["max_ms"] for x in results)),
            "lost": sum(x["lost"] for x in results),
            "ticks": sum(x["ticks"] for x in results),
        }
    bare = summary["bare"]
    rows = []
    for kind, s in summary.items():
        s["median_ratio"], s["p99_ratio"] = s["median_ms"] / bare["median_ms"], s["p99_ms"] / bare["p99_ms"]
        ratio = f"{s['median_ratio']:.2f}x / {s['p99_ratio']:.2f}x"
        cells = [f"{s['median_ms']:.3f}", f"{s['p99_ms']:.3f}", f"{s['max_ms']:.1f}", f"{s['lost']}/{s['ticks']}"]
        rows.append([kind, *cells, ratio])
    print("median and p99: median over the rounds of each run's value; ratio to the bare loop")
    print_table(["loop", "median ms", "p99 ms", "max ms", "lost", "ratio median / p99"], rows)
    actor = [x.get("actor", {}) for x in runs["node+actor"]]
    print(f"actor mode: {actor}")
    verdict = "met" if summary["node+actor"]["median_ratio"] <= GOAL_RATIO else "missed"
    print(f"goal node+actor <= {GOAL_RATIO}x the bare loop (median): {verdict}; load average at start {load}")
    payload = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "loadavg_at_start": load,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "summary": summary,
        "runs": runs,
    }
    print(f"wrote {write_results('ros2_actor_latency', payload, args.out)}")


if __name__ == "__main__":
    main()
