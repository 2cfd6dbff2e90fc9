"""The robot side of the ROS tests: a scripted JointState publisher and command subscriber, and the policy node
launched as its own process (``python -m rslkit.deploy.ros2``), exactly as a user runs it.

The tests must pass on a loaded machine (another process busy on one of two cores): every wait here is on a
condition with a generous bound (:data:`ANSWER_S` and the like), returning as soon as the condition holds, never a
fixed sleep that a descheduled process can outlast.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

StateFn = Callable[[int], tuple[Sequence[float], Sequence[float]]]
"""Tick -> (positions, velocities) of the scripted robot."""
ANSWER_S = 20.0
"""Bound on waiting for the node's answers to states already sent (returns as soon as they are in)."""
START_S = 60.0
"""Bound on a node process starting up (imports, ONNX Runtime session, DDS discovery) or shutting down."""


def _ros_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_ros_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class NodeProcess:
    """``python -m rslkit.deploy.ros2 --policy P --ros-args -p k:=v ...`` in a child process (log to a file)."""

    def __init__(self, policy: Path, params: dict[str, Any], log_path: Path) -> None:
        cmd = [sys.executable, "-m", "rslkit.deploy.ros2", "--policy", str(policy), "--ros-args"]
        for key, value in params.items():
            cmd += ["-p", f"{key}:={_ros_value(value)}"]
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=os.environ.copy())

    def stop(self, robot: Robot | None = None, timeout: float = START_S) -> tuple[int, str]:
        """SIGINT, wait (``robot`` keeps taking messages meanwhile); returns the exit code and the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < end:
            if robot is not None:
                robot.spin_for(0.02)
            else:
                time.sleep(0.02)
        if self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait(timeout=5)
        self._log.close()
        return rc, self.log_path.read_text()

    def log(self) -> str:
        """The log so far."""
        self._log.flush()
        return self.log_path.read_text()


class Robot:
    """A scripted robot: publishes joint states, records the node's commands with their arrival times.

    Args:
        command_topic: also publish ``Float64MultiArray`` commands on this topic.
        image_topics: also publish camera images on these topics: ``sensor_msgs/CompressedImage`` on those ending in
            ``/compressed`` (image_transport's convention), ``sensor_msgs/Image`` on the others.
        instruction_topic: also publish ``std_msgs/String`` instructions on this topic.
    """

    def __init__(
        self,
        array_topic: str = "joint_commands",
        trajectory_topic: str | None = None,
        command_topic: str | None = None,
        image_topics: Sequence[str] = (),
        instruction_topic: str | None = None,
    ) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("scripted_robot", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.state_pub = self.node.create_publisher(JointState, "joint_states", 1000)
        self.command_pub = (
            self.node.create_publisher(Float64MultiArray, command_topic, 10) if command_topic is not None else None
        )
        self.image_pubs = {
            t: self.node.create_publisher(CompressedImage if t.endswith("/compressed") else Image, t, 10)
            for t in image_topics
        }
        self.instruction_pub = (
            self.node.create_publisher(String, instruction_topic, 10) if instruction_topic is not None else None
        )
        self.commands: list[tuple[float, np.ndarray]] = []
        self.primed_commands: list[tuple[float, np.ndarray]] = []
        self.primed_states = 0
        """States sent by the last :meth:`prime` (an upper bound on the ticks the node ran meanwhile)."""
        self.trajectories: list[JointTrajectory] = []
        self.subs = [self.node.create_subscription(Float64MultiArray, array_topic, self._on_array, 1000)]
        if trajectory_topic is not None:
            self.subs.append(
                self.node.create_subscription(JointTrajectory, trajectory_topic, self.trajectories.append, 1000)
            )

    def _on_array(self, msg: Float64MultiArray) -> None:
        self.commands.append((time.perf_counter(), np.asarray(msg.data)))

    def spin_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Process callbacks until ``done()`` or ``timeout`` seconds; returns ``done()``."""
        end = time.monotonic() + timeout
        while not done() and time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)
        return done()

    def settle(self, quiet_s: float, timeout: float = ANSWER_S) -> None:
        """Process callbacks until no command has arrived for ``quiet_s`` seconds (at most ``timeout``)."""
        end = time.monotonic() + timeout
        seen, quiet_since = len(self.commands), time.monotonic()
        while time.monotonic() - quiet_since < quiet_s and time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.005)
            if len(self.commands) != seen:
                seen, quiet_since = len(self.commands), time.monotonic()

    def spin_for(self, seconds: float) -> None:
        """Process callbacks for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=max(0.0, min(0.01, end - time.monotonic())))

    def wait_matched(self, node: NodeProcess, timeout: float = START_S) -> None:
        """Wait until the node subscribes to the states and publishes on every command topic we listen to."""

        def matched() -> bool:
            subs_ok = all(s.get_publisher_count() >= 1 for s in self.subs)
            pubs = [p for p in (self.command_pub, self.instruction_pub, *self.image_pubs.values()) if p is not None]
            pubs_ok = all(p.get_subscription_count() >= 1 for p in pubs)
            return self.state_pub.get_subscription_count() >= 1 and subs_ok and pubs_ok

        if not self.spin_until(lambda: matched() or node.proc.poll() is not None, timeout) or not matched():
            raise RuntimeError(f"The policy node did not match within {timeout} s:\n{node.log()}")

    def prime(
        self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float] = (), settle_s: float = 0.04
    ) -> int:
        """Send ``position`` every 20 ms until commands come back, then wait until no command has arrived for
        ``settle_s`` (the answers to states queued in discovery); returns how many states the node acted on (one
        command each) and forgets their commands. :attr:`primed_states` counts the states sent.

        ``settle_s`` must stay below the node's state timeout (else its watchdog holds never let the stream go
        quiet; the wait then ends after :data:`ANSWER_S`). A subscriber only takes messages from publishers it has
        matched itself; the robot seeing the node's subscription does not mean the node has seen the robot's
        publisher yet, so the first states can be lost.
        """
        end = time.monotonic() + START_S
        self.primed_states = 0
        while not self.commands and time.monotonic() < end:
            self.publish_state(names, position, velocity)
            self.primed_states += 1
            self.spin_for(0.02)
        if not self.commands:
            raise RuntimeError(f"The policy node did not answer a joint state within {START_S:g} s.")
        self.settle(settle_s)
        primed = len(self.commands)
        self.primed_commands = list(self.commands)
        self.commands.clear()
        self.trajectories.clear()
        return primed

    def publish_state(
        self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float] = (), stamp_ns: int = 0
    ) -> None:
        """Send one joint state stamped ``stamp_ns`` (its sample time; 0: now)."""
        msg = JointState(name=list(names), position=[float(x) for x in position])
        msg.velocity = [float(x) for x in velocity]
        stamp_ns = stamp_ns or time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = stamp_ns // 10**9, stamp_ns % 10**9
        self.state_pub.publish(msg)

    def publish_image(self, topic: str, rgb: np.ndarray, encoding: str = "bgr8") -> None:
        """Send one ``uint8 [H, W, 3]`` RGB image as ``encoding`` (``rgb8`` or ``bgr8``), as a camera driver does."""
        pixels = rgb[..., ::-1] if encoding == "bgr8" else rgb
        height, width = rgb.shape[:2]
        msg = Image(height=height, width=width, encoding=encoding, step=3 * width)
        msg.data = np.ascontiguousarray(pixels).tobytes()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(time.time_ns(), 10**9)
        self.image_pubs[topic].publish(msg)

    def publish_compressed_image(self, topic: str, data: bytes, fmt: str) -> None:
        """Send one ``sensor_msgs/CompressedImage`` holding the image file ``data`` (``format`` field ``fmt``)."""
        msg = CompressedImage(format=fmt)
        msg.data = data
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(time.time_ns(), 10**9)
        self.image_pubs[topic].publish(msg)

    def publish_instruction(self, text: str) -> None:
        """Send one instruction."""
        assert self.instruction_pub is not None
        self.instruction_pub.publish(String(data=text))

    def publish_command(self, values: Sequence[float]) -> None:
        """Send one command input."""
        assert self.command_pub is not None
        self.command_pub.publish(Float64MultiArray(data=[float(v) for v in values]))

    def stream(self, names: Sequence[str], n: int, rate_hz: float, state: StateFn) -> list[float]:
        """Publish ``n`` states at ``rate_hz`` (absolute deadlines, stamped with their nominal sample time, as a
        robot driver stamps its samples), processing callbacks in between; returns the send times
        (``time.perf_counter``)."""
        sent: list[float] = []
        t0, stamp0 = time.perf_counter() + 0.005, time.time_ns() + 5_000_000
        for k in range(n):
            deadline = t0 + k / rate_hz
            while (left := deadline - time.perf_counter()) > 0:
                self.executor.spin_once(timeout_sec=min(left, 0.002))
            pos, vel = state(k)
            sent.append(time.perf_counter())
            self.publish_state(names, pos, vel, stamp0 + round(k * 1e9 / rate_hz))
        return sent

    def close(self) -> None:
        """Destroy the node and the context."""
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
