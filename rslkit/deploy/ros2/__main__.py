"""``python -m rslkit.deploy.ros2 --policy policy.onnx [--actor.learner HOST:PORT ...] [--ros-args -p name:=value
...]``: run the policy node (with ``--actor.learner``: in actor mode, streaming transitions to a learner).

SIGINT and SIGTERM stop the node cleanly: it sends a final hold command (the last command sent), waits for the
subscribers to acknowledge it, finishes the recording (and, in actor mode, spools the last transitions and waits up
to ``--actor.drain_s`` for the learner's acknowledgements) and exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from rslkit.deploy.ros2.actor_config import REWARD_KINDS, RobotActorCfg, actor_flag_help


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rslkit.deploy.ros2",
        description="Drive a robot from an exported rslkit ONNX policy (ROS 2 parameters after --ros-args; see "
        "docs/ros2.md).",
    )
    parser.add_argument("--policy", help="the exported .onnx policy (overrides the policy_path parameter)")
    parser.add_argument("--node-name", default="rslkit_policy", help="ROS node name")
    group = parser.add_argument_group("actor mode (real-world RL; docs/ros2.md)")
    helps = actor_flag_help()
    for field in dataclasses.fields(RobotActorCfg):
        default = field.default if field.default is not dataclasses.MISSING else None
        kind = type(default) if isinstance(default, (int, float)) else str
        shown = f" (default: {default!r})" if default not in (None, "") else ""
        group.add_argument(
            f"--actor.{field.name}",
            dest=f"actor_{field.name}",
            type=kind,
            default=default,
            choices=REWARD_KINDS if field.name == "reward" else None,
            metavar=kind.__name__.upper() if field.name != "reward" else None,
            help=helps[field.name] + shown,
        )
    return parser.parse_args(list(argv))


def robot_actor_cfg(args: argparse.Namespace) -> RobotActorCfg | None:
    """The actor mode's settings from ``--actor.*`` (None without ``--actor.learner``).

    Raises:
        ValueError: actor flags without ``--actor.learner``, or bad values.
    """
    values = {f.name: getattr(args, f"actor_{f.name}") for f in dataclasses.fields(RobotActorCfg)}
    if values["learner"] is None:
        defaults = RobotActorCfg(learner="")
        changed = [f"--actor.{k}" for k, v in values.items() if k != "learner" and v != getattr(defaults, k)]
        if changed:
            raise ValueError(f"{', '.join(changed)} need --actor.learner HOST:PORT (the actor mode is off without).")
        return None
    cfg = RobotActorCfg(**values)
    cfg.validate()
    return cfg


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
        print(
            "error: the ROS 2 node needs rclpy: see docs/ros2.md (pip install 'ros-jazzy-rclpy[fastrtps]' ...).",
            file=sys.stderr,
        )
        return 2
    args = _parse(remove_ros_args(["rslkit-ros2", *argv])[1:])
    try:
        actor = robot_actor_cfg(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if actor is not None:
        try:
            import grpc  # noqa: F401
        except ImportError:
            print("error: --actor.learner needs gRPC: pip install 'rslkit[realworld]'", file=sys.stderr)
            return 2
        # the transport, spool and weight loader log through Python logging
        logging.basicConfig(level=logging.INFO, format="[%(levelname)s] [%(name)s]: %(message)s")
    from rslkit.deploy.ros2.node import PolicyNode

    rclpy.init(args=["rslkit-ros2", *argv], signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            node = PolicyNode(args.policy, args.node_name, actor)
        except (ValueError, OSError, ParameterException) as err:  # OSError: a missing file, an unwritable spool
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
