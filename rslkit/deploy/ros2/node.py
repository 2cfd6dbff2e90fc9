"""The rclpy node: ROS parameters to a :class:`PolicyController`, messages to its events, its outputs to topics.

Everything that decides what to send lives in the controller; this file only translates.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Twist
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.duration import Duration as RosDuration
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Bool, Float32, Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.actor_config import RobotActorCfg
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import ControlOutput, PolicyController
from rslkit.deploy.ros2.images import is_compressed_topic, require_decoder
from rslkit.deploy.ros2.recording import (
    COMPRESSED_IMAGE_TYPE,
    IMAGE_TYPE,
    STATUS_TOPIC,
    McapRecorder,
    command_values,
    status_json,
)

if TYPE_CHECKING:
    from rslkit.deploy.ros2.actor import RobotActor

OUTPUT_TYPES = ("array", "trajectory", "both")
COMMAND_TYPES = ("none", "twist", "array")

# name -> (default or, for arrays without a default, the type; description)
PARAMETERS: dict[str, tuple[Any, str]] = {
    "policy_path": ("", "exported ONNX policy (python -m rslkit.export); --policy overrides"),
    "joint_names": (Parameter.Type.STRING_ARRAY, "joints in action order (default: the policy metadata's)"),
    "control_rate_hz": (0.0, "control rate; 0: the policy's control_rate_hz"),
    "trigger": ("state", "'state': tick on joint-state arrival; 'timer': fixed-rate timer"),
    "observation": (["joint_pos_rel", "joint_vel", "last_action"], "observation terms in order"),
    "default_positions": (Parameter.Type.DOUBLE_ARRAY, "joint offsets (default: zeros)"),
    "action_scale": ([1.0], "one value or one per joint"),
    "position_lower": (Parameter.Type.DOUBLE_ARRAY, "lower joint limits (default: none)"),
    "position_upper": (Parameter.Type.DOUBLE_ARRAY, "upper joint limits (default: none)"),
    "max_velocity": (Parameter.Type.DOUBLE_ARRAY, "rate limit per joint, units/s; one value or one per joint"),
    "state_timeout_s": (0.1, "hold when the newest joint state is older than this"),
    "command_type": ("none", "'none', 'twist' (geometry_msgs/Twist -> [vx, vy, wz]) or 'array'"),
    "command_dim": (0, "size of an 'array' command (Float64MultiArray)"),
    "command_timeout_s": (0.0, "commands older than this fall back to zeros; 0: never"),
    "joint_state_topic": ("joint_states", "sensor_msgs/JointState input"),
    "command_topic": ("command", "command input"),
    "output_type": ("array", "'array' (Float64MultiArray), 'trajectory' (JointTrajectory) or 'both'"),
    "array_topic": ("joint_commands", "std_msgs/Float64MultiArray output, joint_names order"),
    "trajectory_topic": ("joint_trajectory", "trajectory_msgs/JointTrajectory output"),
    "state_reliability": ("reliable", "joint-state subscription QoS: 'reliable' or 'best_effort'"),
    "state_queue_depth": (10, "joint states queued while the node is busy (older ones are dropped)"),
    "chunk_merge": ("replace", "chunk policies: 'replace', 'blend' or 'ensemble'"),
    "chunk_in_flight": (1, "chunk policies: inference requests computed at once (a worker thread each)"),
    "chunk_worker_rt_priority": (0, "chunk policies: SCHED_FIFO priority of the inference workers; 0: inherited"),
    "future_state_mode": ("absolute", "chunk policies with a future_state input: 'absolute' or 'delta' actions"),
    "camera_topics": (
        Parameter.Type.STRING_ARRAY,
        "VLA: 'name=topic' per camera (default camera/<name>/image_raw); a topic ending in /compressed takes "
        "sensor_msgs/CompressedImage (JPEG / PNG)",
    ),
    "image_timeout_s": (0.5, "VLA: hold when a camera's newest valid image is older than this"),
    "instruction": ("", "VLA: the instruction to follow (one stored at export); empty: wait for the topic"),
    "instruction_topic": ("instruction", "VLA: std_msgs/String instructions, looked up in the exported table"),
    "record_path": ("", "MCAP file recording inputs and outputs; empty: off"),
    "intra_op_threads": (1, "ONNX Runtime threads"),
}


class PolicyNode(Node):
    """Subscribes to joint states (and a command), publishes safe joint commands from an ONNX policy.

    Args:
        policy_path: overrides the ``policy_path`` parameter when given.
        node_name: the ROS node name.
        actor: the actor mode's settings (None: off): record and stream transitions, take the learner's policies.

    Raises:
        ValueError: for missing or inconsistent parameters (the message names the parameter).
    """

    def __init__(
        self, policy_path: str | None = None, node_name: str = "rslkit_policy", actor: RobotActorCfg | None = None
    ) -> None:
        super().__init__(node_name)
        for name, (default, description) in PARAMETERS.items():  # read at start only: read-only
            self.declare_parameter(name, default, ParameterDescriptor(description=description, read_only=True))
        p = self._param
        path = policy_path or p("policy_path")
        if not path:
            raise ValueError("No policy: pass --policy policy.onnx or set the policy_path parameter.")
        self.policy_path = str(path)
        self.policy = OnnxPolicy(path, intra_op_threads=int(p("intra_op_threads")), check_outputs=False)
        self.cfg = self._controller_cfg()
        self.command_type = str(p("command_type"))
        self.output_type = str(p("output_type"))
        if self.output_type not in OUTPUT_TYPES or self.command_type not in COMMAND_TYPES:
            raise ValueError(
                f"output_type must be one of {OUTPUT_TYPES} and command_type one of {COMMAND_TYPES}; got "
                f"'{self.output_type}', '{self.command_type}'."
            )
        self.controller = PolicyController(self.policy, self.cfg, logger=self.get_logger())
        self._t0_ns = time.monotonic_ns()
        self._wall0_ns = time.time_ns()
        self.topics = {k: str(p(k)) for k in ("joint_state_topic", "command_topic", "array_topic", "trajectory_topic")}
        self.camera_topics = self._camera_topics(p("camera_topics"))
        if any(is_compressed_topic(t) for t in self.camera_topics.values()):
            require_decoder()
        self.instruction_topic = str(p("instruction_topic"))
        self.recorder = self._make_recorder(str(p("record_path")))
        self._make_endpoints(str(p("state_reliability")), int(p("state_queue_depth")))
        self._make_vla_endpoints(self.instruction_topic)
        self.actor: RobotActor | None = None
        if actor is not None:  # imported only here: without the actor mode the node needs no grpc
            from rslkit.deploy.ros2.actor import RobotActor

            self.actor = RobotActor(actor, self.controller, self.get_logger(), int(p("intra_op_threads")))
            self._make_reward_endpoints(actor, self.actor)
        details = ""
        if self.policy.kind == "chunk":
            merge, in_flight = self.cfg.chunk_merge, self.cfg.chunk_in_flight
            details = f", chunks merged by '{merge}' with {in_flight} request(s) in flight"
        for camera, topic in self.camera_topics.items():
            kind = "CompressedImage" if is_compressed_topic(topic) else "Image"
            details += f", camera '{camera}' from '{topic}' ({kind})"
        inputs = self.controller.inputs
        if inputs is not None and inputs.takes_instruction:
            details += f", instruction {inputs.instruction!r} (topic '{self.instruction_topic}')"
        self.get_logger().info(
            f"Policy '{path}' ({self.policy.kind}, {len(self.cfg.joint_names)} joints) at {self.cfg.rate_hz:g} Hz, "
            f"trigger '{self.cfg.trigger}', observation {self.cfg.observation}{details}."
        )

    # ------------------------------------------------------------------ set-up
    def _param(self, name: str) -> Any:
        """The parameter's value (None for an array parameter left unset)."""
        try:
            return self.get_parameter(name).value
        except ParameterUninitializedException:
            return None

    def _controller_cfg(self) -> ControllerCfg:
        p = self._param
        joints = p("joint_names") or self.policy.meta.joint_names
        if not joints:
            raise ValueError(
                "The policy's metadata names no joints; set the joint_names parameter: the joints in the policy's "
                "action order."
            )
        rate = float(p("control_rate_hz"))
        if rate < 0:
            raise ValueError(f"control_rate_hz must be > 0 (or 0: the policy's own rate), got {rate:g}.")
        rate = rate or (self.policy.meta.control_rate_hz or 0.0)
        if rate <= 0:
            raise ValueError("The policy has no control_rate_hz; set the control_rate_hz parameter.")
        command_type = str(p("command_type"))
        command_dim = 3 if command_type == "twist" else int(p("command_dim")) if command_type == "array" else 0

        def optional(name: str) -> list[float] | None:
            value = p(name)
            return [float(x) for x in value] if value else None

        def one_or_many(name: str) -> list[float] | float | None:
            value = optional(name)
            return value[0] if value is not None and len(value) == 1 else value

        scale = one_or_many("action_scale")
        return ControllerCfg(
            joint_names=list(joints),
            rate_hz=rate,
            observation=list(p("observation")),
            default_positions=optional("default_positions"),
            action_scale=1.0 if scale is None else scale,
            position_lower=optional("position_lower"),
            position_upper=optional("position_upper"),
            max_velocity=one_or_many("max_velocity"),
            state_timeout_s=float(p("state_timeout_s")),
            command_dim=command_dim,
            command_timeout_s=float(p("command_timeout_s")),
            trigger=p("trigger"),
            chunk_merge=p("chunk_merge"),
            chunk_in_flight=int(p("chunk_in_flight")),
            chunk_worker_rt_priority=int(p("chunk_worker_rt_priority")) or None,
            future_state_mode=p("future_state_mode"),
            image_timeout_s=float(p("image_timeout_s")),
            instruction=str(p("instruction")),
        )

    def _camera_topics(self, entries: list[str] | None) -> dict[str, str]:
        """Camera name -> image topic for the policy's cameras (``name=topic`` entries override the defaults)."""
        cameras = [g[len("camera_") :] for g in self.policy.camera_groups]
        topics = {c: f"camera/{c}/image_raw" for c in cameras}
        for entry in entries or []:
            name, sep, topic = entry.partition("=")
            if not sep or not topic or name not in topics:
                raise ValueError(
                    f"camera_topics entry '{entry}' must be 'name=topic' with name one of the policy's cameras "
                    f"{cameras}."
                )
            topics[name] = topic
        return topics

    def _make_recorder(self, path: str) -> McapRecorder | None:
        if not path:
            return None
        meta = {
            **self.topics,
            "command_type": self.command_type,
            "time_base_ns": str(self._wall0_ns),
            "policy_path": str(Path(self.policy_path).resolve()),
            "controller": json.dumps(asdict(self.cfg)),
            "camera_topics": json.dumps(self.camera_topics),
            "instruction_topic": self.instruction_topic,
        }
        self.get_logger().info(f"Recording inputs and outputs to '{path}'.")
        return McapRecorder(path, meta)

    def _make_endpoints(self, reliability: str, depth: int) -> None:
        if reliability not in ("best_effort", "reliable"):
            raise ValueError(f"state_reliability must be 'best_effort' or 'reliable', got '{reliability}'.")
        if depth < 1:
            raise ValueError(f"state_queue_depth must be >= 1, got {depth}.")
        qos = QoSProfile(
            depth=depth,
            reliability=ReliabilityPolicy.BEST_EFFORT if reliability == "best_effort" else ReliabilityPolicy.RELIABLE,
        )
        self.create_subscription(JointState, self.topics["joint_state_topic"], self._on_state, qos)
        if self.command_type != "none":
            kind = Twist if self.command_type == "twist" else Float64MultiArray
            self.create_subscription(kind, self.topics["command_topic"], self._on_command, 10)
        self.array_pub = (
            self.create_publisher(Float64MultiArray, self.topics["array_topic"], 10)
            if self.output_type in ("array", "both")
            else None
        )
        self.trajectory_pub = (
            self.create_publisher(JointTrajectory, self.topics["trajectory_topic"], 10)
            if self.output_type in ("trajectory", "both")
            else None
        )
        self.timer = self.create_timer(1.0 / self.cfg.rate_hz, self._on_timer)

    def _make_vla_endpoints(self, instruction_topic: str) -> None:
        # sensor-data QoS (best effort, shallow): matches reliable and best-effort camera publishers alike
        # a topic ending in /compressed (image_transport's compressed transport) carries sensor_msgs/CompressedImage
        for camera, topic in self.camera_topics.items():
            compressed = is_compressed_topic(topic)
            handler: Any = self._on_compressed_image if compressed else self._on_image
            kind = CompressedImage if compressed else Image
            self.create_subscription(kind, topic, functools.partial(handler, camera, topic), qos_profile_sensor_data)
        inputs = self.controller.inputs
        if inputs is not None and inputs.takes_instruction:
            self.create_subscription(String, instruction_topic, self._on_instruction, 10)

    def _make_reward_endpoints(self, actor: RobotActorCfg, robot_actor: RobotActor) -> None:
        reward: Any = robot_actor.reward  # a TopicReward for the topic and json sources
        if actor.reward == "topic":
            self.create_subscription(Float32, actor.reward_topic, lambda m: reward.on_reward(m.data), 10)
            self.create_subscription(Bool, actor.done_topic, lambda m: reward.on_done(m.data), 10)
        elif actor.reward == "json":
            self.create_subscription(String, actor.reward_topic, lambda m: reward.on_json(m.data), 10)

    # ------------------------------------------------------------------ events
    def _now(self) -> tuple[float, int]:
        """Seconds since start (the controller's clock) and the matching log time in wall-clock nanoseconds."""
        elapsed = time.monotonic_ns() - self._t0_ns
        return elapsed * 1e-9, self._wall0_ns + elapsed

    def _record(self, topic: str, datatype: str, msg: Any, log_ns: int) -> None:
        if self.recorder is not None:
            self.recorder.write(topic, datatype, serialize_message(msg), log_ns)

    def _on_state(self, msg: JointState) -> None:
        now, log_ns = self._now()
        self._record(self.topics["joint_state_topic"], "sensor_msgs/msg/JointState", msg, log_ns)
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self._send(self.controller.on_joint_state(now, msg.name, msg.position, msg.velocity, stamp), log_ns)

    def _on_image(self, camera: str, topic: str, msg: Image) -> None:
        now, log_ns = self._now()
        self._record(topic, IMAGE_TYPE, msg, log_ns)
        self.controller.on_image(now, camera, msg.encoding, msg.height, msg.width, msg.step, msg.data)

    def _on_compressed_image(self, camera: str, topic: str, msg: CompressedImage) -> None:
        now, log_ns = self._now()
        self._record(topic, COMPRESSED_IMAGE_TYPE, msg, log_ns)
        self.controller.on_compressed_image(now, camera, msg.data)  # decoded here: a few ms at 640x480 (docs)

    def _on_instruction(self, msg: String) -> None:
        now, log_ns = self._now()
        self._record(self.instruction_topic, "std_msgs/msg/String", msg, log_ns)
        self.controller.on_instruction(now, msg.data)

    def _on_command(self, msg: Any) -> None:
        now, log_ns = self._now()
        datatype = "geometry_msgs/msg/Twist" if self.command_type == "twist" else "std_msgs/msg/Float64MultiArray"
        self._record(self.topics["command_topic"], datatype, msg, log_ns)
        self.controller.on_command(now, command_values(msg, self.command_type))

    def _on_timer(self) -> None:
        now, log_ns = self._now()
        self._send(self.controller.on_timer(now), log_ns)

    def _send(self, out: ControlOutput | None, log_ns: int) -> None:
        if out is None:
            return
        positions = [float(x) for x in out.positions]
        if self.array_pub is not None:
            array = Float64MultiArray(data=positions)
            self.array_pub.publish(array)
            self._record(self.topics["array_topic"], "std_msgs/msg/Float64MultiArray", array, log_ns)
        if self.trajectory_pub is not None:
            period_ns = int(1e9 / self.cfg.rate_hz)
            point = JointTrajectoryPoint(
                positions=positions, time_from_start=Duration(sec=period_ns // 10**9, nanosec=period_ns % 10**9)
            )
            traj = JointTrajectory(joint_names=self.cfg.joint_names, points=[point])
            self.trajectory_pub.publish(traj)
            self._record(self.topics["trajectory_topic"], "trajectory_msgs/msg/JointTrajectory", traj, log_ns)
        if self.recorder is not None:
            self._record(STATUS_TOPIC, "std_msgs/msg/String", String(data=status_json(out)), log_ns)

    # ------------------------------------------------------------------ shutdown
    def close(self, ack_timeout_s: float = 1.0) -> None:
        """Send the final hold command, wait for subscribers to acknowledge it, and finish the recording."""
        now, log_ns = self._now()
        out = self.controller.shutdown(now)
        self._send(out, log_ns)
        if out is not None:
            self.get_logger().info(f"Shut down holding position {[round(float(x), 4) for x in out.positions]}.")
        for pub in (self.array_pub, self.trajectory_pub):
            if pub is not None:
                pub.wait_for_all_acked(RosDuration(seconds=ack_timeout_s))
        if self.recorder is not None:
            self.recorder.close()
        if self.actor is not None:
            self.actor.close()
        self.get_logger().info(f"Outputs and faults: {dict(self.controller.counts)}.")
