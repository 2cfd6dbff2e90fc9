"""State -> command latency of the ROS 2 policy node at 200 Hz (real rclpy, loopback, private network namespace).

A scripted robot (rclpy, this process) publishes ``sensor_msgs/JointState`` at 200 Hz and receives the node's
``std_msgs/Float64MultiArray`` commands; the node runs as its own process (``python -m rslkit.deploy.ros2``) with
its default settings (reliable state subscription, queue depth 10, trigger on state arrival) except a 5 s
watchdog, so that every command answers a state and lost states show as missing commands. Latency = command
arrival - state send, both on this process's ``time.perf_counter``; it includes DDS transport both ways, the node's
executor, the controller and the policy, and this process's executor. Policies (random weights, built with the
onnx helper API; latency does not depend on training):

* ``mlp``: a legged-robot-sized step policy, 12 joints, observation joint_pos_rel + joint_vel + last_action (36)
  -> 512, 256, 128 -> 12.
* ``chunk``: a 7-joint chunk policy, observation joint_pos + joint_vel (14) -> 256, 256, 256 -> 16 x 7 actions,
  executed through the asynchronous chunk engine (inference on the node's worker thread).

Each policy runs with both state subscriptions (``--queue-depth``, default 10 as in the node): ``reliable`` (the
node's default) and ``best_effort``.
Runs alternate between the four configurations (``--rounds`` rounds of ``--ticks`` ticks each). Needs the ROS
venv: ``make .venv-ros/.installed && .venv-ros/bin/python benchmarks/ros2_latency.py`` (re-runs itself under
``unshare -n`` with loopback only). Writes ``benchmarks/results/ros2_latency.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "ros2"))  # the scripted robot of the ROS tests

from _common import cpu_model, print_table, write_results  # noqa: E402

ANCHOR_MS = "0.6-0.7"  # rclpy JointState -> ONNX -> command, median, this machine kind (shared/ANCHORS.md)


def _isolate(argv: list[str]) -> None:
    """Re-exec inside a private network namespace with only loopback, discovery restricted to localhost."""
    if {name for _, name in socket.if_nameindex()} == {"lo"}:
        return
    if os.environ.get("RSLKIT_NETNS") == "1":
        raise RuntimeError("Still not isolated after unshare -n.")
    env = {**os.environ, "RSLKIT_NETNS": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]
    script = f"{sys.executable} {ROOT / 'tests/ros2/lo_up.py'} && exec {sys.executable} {' '.join(argv)}"
    os.execvpe(unshare[0], [*unshare, "sh", "-c", script], env)


def _policies(d: Path) -> dict[str, tuple[Path, dict[str, Any], int]]:
    from rslkit.deploy.ros2.synthetic import chunk_policy, mlp_policy

    mlp = mlp_policy(d / "mlp.onnx", 36, 12, hidden=(512, 256, 128), control_rate_hz=200.0)
    chunk = chunk_policy(d / "chunk.onnx", 14, 7, 16, hidden=(256, 256, 256), control_rate_hz=200.0)
    return {
        "mlp": (mlp, {"observation": ["joint_pos_rel", "joint_vel", "last_action"]}, 12),
        "chunk": (chunk, {"observation": ["joint_pos", "joint_vel"]}, 7),
    }


def _policy_only_us(path: Path, obs_dim: int, iters: int = 2000) -> float:
    """Median in-process OnnxPolicy call (microseconds), for reference."""
    from rslkit.deploy.onnx_policy import OnnxPolicy

    policy = OnnxPolicy(path)
    x = np.zeros(obs_dim, np.float32)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        policy(x)
        times.append(time.perf_counter() - t)
    return float(np.median(times[100:]) * 1e6)


def _run(path: Path, params: dict[str, Any], n_joints: int, ticks: int, log: Path) -> dict[str, Any]:
    from ros_harness import NodeProcess, Robot

    names = [f"joint{i}" for i in range(n_joints)]
    # a long watchdog: a stall of the shared CPU must not add hold commands, which would hide lost states
    node = NodeProcess(path, {"joint_names": names, "state_timeout_s": 5.0, **params}, log)
    robot = Robot()
    try:
        robot.wait_matched(node)
        robot.prime(names, [0.0] * n_joints, [0.0] * n_joints)
        rng = np.random.default_rng(0)
        states = 0.1 * rng.standard_normal((ticks, n_joints))
        sent = np.asarray(robot.stream(names, ticks, 200.0, lambda k: (states[k], np.zeros(n_joints))))
        robot.spin_until(lambda: len(robot.commands) >= ticks, 2.0)
        robot.spin_for(0.05)
        arrived = np.asarray([t for t, _ in robot.commands])
    finally:
        node.stop(robot)
        robot.close()
    if len(arrived) == ticks:  # one command per state, in order: exact pairing
        latency, pairing = arrived - sent, "by order"
    else:  # pair each command with the newest state sent before it
        idx = np.searchsorted(sent, arrived) - 1
        latency, pairing = arrived[idx >= 0] - sent[idx[idx >= 0]], "newest state before arrival"
    ms = latency * 1e3
    return {
        "ticks": ticks,
        "commands": len(arrived),
        "lost": max(0, ticks - len(arrived)),
        "pairing": pairing,
        "median_ms": float(np.median(ms)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=1000, help="states per run (200 Hz)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per policy")
    parser.add_argument("--queue-depth", type=int, default=10, help="state_queue_depth of the node (default 10)")
    parser.add_argument("--out", default=None, help="results JSON (default: benchmarks/results/ros2_latency.json)")
    args = parser.parse_args()
    _isolate([str(Path(__file__).resolve()), *sys.argv[1:]])
    load = [round(x, 2) for x in os.getloadavg()]
    qos = {
        "best_effort": {"state_reliability": "best_effort", "state_queue_depth": args.queue_depth},
        "reliable": {"state_reliability": "reliable", "state_queue_depth": args.queue_depth},
    }
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        policies = _policies(Path(tmp))
        policy_us = {"mlp": _policy_only_us(policies["mlp"][0], 36), "chunk": _policy_only_us(policies["chunk"][0], 14)}
        for r in range(args.rounds):
            for kind, (path, params, n) in policies.items():
                for q, q_params in qos.items():
                    result = _run(path, {**params, **q_params}, n, args.ticks, Path(tmp) / f"{kind}{q}{r}.log")
                    runs.setdefault(f"{kind} {q}", []).append(result)
                    print(f"round {r} {kind} {q}: {result}", flush=True)
    rows, summary = [], {}
    for name, results in runs.items():
        med = float(np.median([x["median_ms"] for x in results]))
        p99 = float(np.median([x["p99_ms"] for x in results]))
        lost = sum(x["lost"] for x in results)
        total = sum(x["ticks"] for x in results)
        us = policy_us[name.split()[0]]
        summary[name] = {"median_ms": med, "p99_ms": p99, "lost": lost, "ticks": total, "policy_us": us}
        rows.append([name, f"{med:.2f}", f"{p99:.2f}", f"{lost}/{total}", f"{us:.0f}"])
    print("median and p99: median over the rounds of each run's value")
    print_table(["policy / state QoS", "median ms", "p99 ms", "lost", "policy alone us"], rows)
    print(f"anchor (rclpy JointState -> ONNX -> command, median): {ANCHOR_MS} ms; load average at start {load}")
    payload = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "loadavg_at_start": load,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "anchor_median_ms": ANCHOR_MS,
        "state_queue_depth": args.queue_depth,
        "summary": summary,
        "runs": runs,
    }
    print(f"wrote {write_results('ros2_latency', payload, args.out)}")


if __name__ == "__main__":
    main()
