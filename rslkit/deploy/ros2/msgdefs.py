"""ROS 2 message definitions (``ros2msg`` text, dependencies appended) of the topics the node records.

An MCAP file with the ``ros2`` profile stores each channel's schema as the message definition followed by the
definitions it uses, separated by a line of ``=`` and ``MSG: pkg/Type`` (the layout rosbag2 writes), so the file
decodes without ROS installed.
"""

from __future__ import annotations

_SEP = "=" * 80

_TIME = "int32 sec\nuint32 nanosec\n"
_HEADER = "builtin_interfaces/Time stamp\nstring frame_id\n"
_BASE = {
    "builtin_interfaces/Time": _TIME,
    "builtin_interfaces/Duration": "int32 sec\nuint32 nanosec\n",
    "std_msgs/Header": _HEADER,
    "std_msgs/MultiArrayDimension": "string label\nuint32 size\nuint32 stride\n",
    "std_msgs/MultiArrayLayout": "MultiArrayDimension[] dim\nuint32 data_offset\n",
    "trajectory_msgs/JointTrajectoryPoint": (
        "float64[] positions\nfloat64[] velocities\nfloat64[] accelerations\nfloat64[] effort\n"
        "builtin_interfaces/Duration time_from_start\n"
    ),
    "geometry_msgs/Vector3": "float64 x\nfloat64 y\nfloat64 z\n",
}

_MESSAGES: dict[str, tuple[str, list[str]]] = {
    "sensor_msgs/msg/JointState": (
        "std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\nfloat64[] effort\n",
        ["std_msgs/Header", "builtin_interfaces/Time"],
    ),
    "std_msgs/msg/Float64MultiArray": (
        "MultiArrayLayout layout\nfloat64[] data\n",
        ["std_msgs/MultiArrayLayout", "std_msgs/MultiArrayDimension"],
    ),
    "trajectory_msgs/msg/JointTrajectory": (
        "std_msgs/Header header\nstring[] joint_names\nJointTrajectoryPoint[] points\n",
        [
            "std_msgs/Header",
            "builtin_interfaces/Time",
            "trajectory_msgs/JointTrajectoryPoint",
            "builtin_interfaces/Duration",
        ],
    ),
    "sensor_msgs/msg/Image": (
        "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\nuint32 step\n"
        "uint8[] data\n",
        ["std_msgs/Header", "builtin_interfaces/Time"],
    ),
    "sensor_msgs/msg/CompressedImage": (
        "std_msgs/Header header\nstring format\nuint8[] data\n",
        ["std_msgs/Header", "builtin_interfaces/Time"],
    ),
    "geometry_msgs/msg/Twist": ("Vector3 linear\nVector3 angular\n", ["geometry_msgs/Vector3"]),
    "std_msgs/msg/String": ("string data\n", []),
}


def message_definition(datatype: str) -> str:
    """The full ``ros2msg`` schema text of ``datatype`` (e.g. ``sensor_msgs/msg/JointState``).

    Raises:
        ValueError: for a type the recorder does not know.
    """
    if datatype not in _MESSAGES:
        raise ValueError(f"No message definition for '{datatype}'; known types: {sorted(_MESSAGES)}.")
    text, deps = _MESSAGES[datatype]
    parts = [text]
    for dep in deps:
        parts.append(f"{_SEP}\nMSG: {dep}\n{_BASE[dep]}")
    return "".join(parts)
