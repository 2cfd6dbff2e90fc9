"""Recording the node's inputs and outputs to MCAP (ROS 2 CDR messages), and replaying them into a controller.

The recorder stores CDR-serialized messages (what rclpy's ``serialize_message`` returns) under the ``ros2``
profile, so Foxglove, ``ros2 bag`` and :func:`replay` read it. Every command the node sends has a status record on
:data:`STATUS_TOPIC` (JSON: tick, status, reason, source, positions); :func:`replay` feeds the recorded joint states,
commands, camera images (``sensor_msgs/Image`` or ``CompressedImage``) and instructions, and the timer and shutdown
events named by the status records, into a new :class:`~rslkit.deploy.ros2.controller.PolicyController` at their
recorded times: the same code path as the node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import ControlOutput, PolicyController
from rslkit.deploy.ros2.msgdefs import message_definition

STATUS_TOPIC = "/rslkit/status"
METADATA_NAME = "rslkit_ros2"


def _import_mcap() -> tuple[Any, Any, Any]:
    try:
        from mcap.reader import make_reader
        from mcap.writer import Writer
        from mcap_ros2.decoder import DecoderFactory
    except ImportError as err:
        raise ImportError("Recording needs the MCAP libraries: pip install 'rslkit[ros]'.") from err
    return Writer, make_reader, DecoderFactory


class McapRecorder:
    """Appends CDR-encoded ROS 2 messages to an MCAP file; :meth:`close` finishes it (also on ``with`` exit).

    Args:
        path: the ``.mcap`` file (overwritten).
        metadata: string pairs stored as the file's ``rslkit_ros2`` metadata record (topics, joints, time base).
    """

    def __init__(self, path: str | Path, metadata: dict[str, str] | None = None) -> None:
        writer_cls, _, _ = _import_mcap()
        self.path = Path(path)
        self._file: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._writer = writer_cls(self._file)
        self._writer.start(profile="ros2", library="rslkit")
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._sequence = 0
        self.closed = False
        if metadata:
            self._writer.add_metadata(METADATA_NAME, metadata)

    def write(self, topic: str, datatype: str, cdr: bytes, log_time_ns: int) -> None:
        """Record one message ``cdr`` (serialized ``datatype``, e.g. ``sensor_msgs/msg/JointState``) on ``topic``."""
        if self.closed:
            raise ValueError(f"The recording '{self.path}' is closed.")
        channel = self._channels.get(topic)
        if channel is None:
            schema = self._schemas.get(datatype)
            if schema is None:
                schema = self._writer.register_schema(datatype, "ros2msg", message_definition(datatype).encode())
                self._schemas[datatype] = schema
            channel = self._writer.register_channel(topic, "cdr", schema)
            self._channels[topic] = channel
        self._sequence += 1
        self._writer.add_message(channel, log_time_ns, cdr, log_time_ns, self._sequence)

    def close(self) -> None:
        """Write the summary and close the file (idempotent)."""
        if not self.closed:
            self.closed = True
            self._writer.finish()
            self._file.close()

    def __enter__(self) -> McapRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def status_json(out: ControlOutput) -> str:
    """The status record of one command."""
    return json.dumps(
        {
            "tick": out.tick,
            "status": out.status,
            "reason": out.reason,
            "source": out.source,
            "positions": [float(x) for x in out.positions],
        }
    )


IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"


@dataclass
class RecordedMessage:
    """One decoded message: ``time_s`` is seconds since the recording's time base; ``datatype`` its ROS type
    (``sensor_msgs/msg/JointState``, ...)."""

    topic: str
    time_s: float
    msg: Any
    datatype: str


def read_recording(path: str | Path) -> tuple[dict[str, str], Iterator[RecordedMessage]]:
    """The file's ``rslkit_ros2`` metadata and its messages in log-time order (decoded, ROS-free).

    Raises:
        ValueError: when the file was not written by the rslkit node (no metadata).
    """
    _, make_reader, decoder_factory = _import_mcap()
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[decoder_factory()])
        meta = next((m.metadata for m in reader.iter_metadata() if m.name == METADATA_NAME), None)
    if meta is None:
        raise ValueError(f"'{path}' has no '{METADATA_NAME}' metadata; record it with the rslkit node (record_path).")
    base = int(meta["time_base_ns"])

    def messages() -> Iterator[RecordedMessage]:
        with open(path, "rb") as f:
            reader = make_reader(f, decoder_factories=[decoder_factory()])
            for schema, channel, message, decoded in reader.iter_decoded_messages(log_time_order=True):
                datatype = schema.name if schema is not None else ""
                yield RecordedMessage(channel.topic, (message.log_time - base) * 1e-9, decoded, datatype)

    return dict(meta), messages()


def recorded_controller_cfg(meta: dict[str, str]) -> ControllerCfg:
    """The controller settings the node ran with (from :func:`read_recording` metadata)."""
    return ControllerCfg(**json.loads(meta["controller"]))


def recorded_cameras(meta: dict[str, str]) -> dict[str, str]:
    """Camera topic -> camera name the node recorded images of (from :func:`read_recording` metadata; empty for a
    policy without cameras)."""
    return {topic: camera for camera, topic in json.loads(meta.get("camera_topics", "{}")).items()}


def command_values(msg: Any, command_type: str) -> list[float]:
    """The command vector of a ``geometry_msgs/Twist`` (``[vx, vy, wz]``) or ``Float64MultiArray`` message."""
    if command_type == "twist":
        return [msg.linear.x, msg.linear.y, msg.angular.z]
    return list(msg.data)


@dataclass
class Replay:
    """What :func:`replay` produced next to what the node recorded (status records), in order."""

    outputs: list[ControlOutput]
    recorded: list[dict[str, Any]]

    def max_difference(self) -> float:
        """Largest ``|replayed - recorded|`` joint command (inf when the counts or statuses differ)."""
        if len(self.outputs) != len(self.recorded):
            return float("inf")
        worst = 0.0
        for out, rec in zip(self.outputs, self.recorded):
            if out.status != rec["status"] or out.source != rec["source"]:
                return float("inf")
            worst = max(worst, float(np.abs(out.positions - np.asarray(rec["positions"])).max()))
        return worst


def replay(path: str | Path, controller: PolicyController) -> Replay:
    """Feed a recording into ``controller`` (built with the recorded settings) through its event methods.

    Joint states go to ``on_joint_state``, commands to ``on_command``, camera images to ``on_image`` /
    ``on_compressed_image`` and instructions to ``on_instruction`` at their recorded times; status records of timer
    ticks call ``on_timer`` and the shutdown record calls ``shutdown``. Step and recurrent policies (with or without
    cameras) reproduce the recorded commands exactly; chunk policies (VLA ones included) depend on inference timing
    and reproduce them up to which chunk was ready at each tick.

    Raises:
        ValueError: when the controller's policy reads cameras the recording holds no images of.
    """
    meta, messages = read_recording(path)
    cameras = recorded_cameras(meta)
    _check_cameras(controller, cameras, path)
    state_topic, command_topic = meta["joint_state_topic"], meta.get("command_topic", "")
    instruction_topic = meta.get("instruction_topic") if controller.inputs is not None else None
    command_type = meta.get("command_type", "none")
    outputs: list[ControlOutput] = []
    recorded: list[dict[str, Any]] = []
    for rec in messages:
        out: ControlOutput | None = None
        if rec.topic == state_topic:
            m = rec.msg
            stamp = m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
            out = controller.on_joint_state(rec.time_s, list(m.name), list(m.position), list(m.velocity), stamp)
        elif command_type != "none" and rec.topic == command_topic:
            controller.on_command(rec.time_s, command_values(rec.msg, command_type))
        elif rec.topic in cameras:
            _replay_image(controller, cameras[rec.topic], rec)
        elif rec.topic == instruction_topic:
            controller.on_instruction(rec.time_s, rec.msg.data)
        elif rec.topic == STATUS_TOPIC:
            status = json.loads(rec.msg.data)
            recorded.append(status)
            if status["source"] == "timer":
                out = controller.on_timer(rec.time_s)
            elif status["source"] == "shutdown":
                out = controller.shutdown(rec.time_s)
        if out is not None:
            outputs.append(out)
    return Replay(outputs, recorded)


def _check_cameras(controller: PolicyController, cameras: dict[str, str], path: str | Path) -> None:
    """Refuse a replay whose controller reads cameras the recording did not record."""
    wanted = controller.inputs.cameras if controller.inputs is not None else []
    missing = [c for c in wanted if c not in cameras.values()]
    if missing:
        raise ValueError(
            f"The policy reads cameras {missing} but '{path}' holds no images of them (recorded cameras: "
            f"{sorted(cameras.values())}); replay it with the policy it was recorded with (metadata policy_path)."
        )


def _replay_image(controller: PolicyController, camera: str, rec: RecordedMessage) -> None:
    """A recorded ``sensor_msgs/Image`` or ``CompressedImage`` of ``camera`` into the controller."""
    m = rec.msg
    if rec.datatype == COMPRESSED_IMAGE_TYPE:
        controller.on_compressed_image(rec.time_s, camera, m.data)
    elif rec.datatype == IMAGE_TYPE:
        controller.on_image(rec.time_s, camera, m.encoding, m.height, m.width, m.step, m.data)
    else:
        raise ValueError(f"Camera topic '{rec.topic}' holds '{rec.datatype}' messages; the node records images only.")
