"""``python -m rslkit.deploy.ros2 --policy policy.onnx [--ros-args -p name:=value ...]``: run the policy node.

SIGINT and SIGTERM stop the node cleanly: it sends a final hold command (the last command sent), waits for the
subscribers to acknowledge it, finishes the recording and exits.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rslkit.deploy.ros2",
        description="Drive a robot from an exported rslkit ONNX policy (ROS 2 parameters after --ros-args; see "
        "docs/ros2.md).",
    )
    parser.add_argument("--policy", help="the exported .onnx policy (overrides the policy_path parameter)")
    parser.add_argument("--node-name", default="rslkit_policy", help="ROS node name")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the node until SIGINT / SIGTERM; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        import rclpy
        from rclpy.exceptions import ParameterException
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions
        from rclpy.utilities import remove_ros_args
    except ImportError:
        print("The ROS 2 node needs rclpy: see docs/ros2.md (pip install 'ros-jazzy-rclpy[fastrtps]' ...).")
        return 2
    args = _parse(remove_ros_args(["rslkit-ros2", *argv])[1:])
    from rslkit.deploy.ros2.node import PolicyNode

    rclpy.init(args=["rslkit-ros2", *argv], signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            node = PolicyNode(args.policy, args.node_name)
        except (ValueError, FileNotFoundError, ParameterException) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)
        node.close()
        executor.remove_node(node)
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
