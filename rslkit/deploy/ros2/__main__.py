"""``python -m rslkit.deploy.ros2 --policy policy.onnx [--actor.learner HOST:PORT ...] [--ros-args -p name:=value
...]``: run the policy node (with ``--actor.learner``: in actor mode, streaming transitions to a learner).

SIGINT and SIGTERM stop the node cleanly: it sends a final hold command (the last command sent), waits for the
subscribers to acknowledge it, finishes the recording (and, in actor mode, spools the last transitions and waits up
to ``--actor.drain_s`` for the learner's acknowledgements) and exits.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from rslkit.deploy.ros2.actor_config import RobotActorCfg, actor_flag_help
from rslkit.utils.config import apply_overrides


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The node's own flags, and the ``--actor.*`` overrides (the rest of ``argv``)."""
    defaults = RobotActorCfg()
    flags = []
    for name, text in actor_flag_help().items():
        default = getattr(defaults, name)
        flags.append(f"  --actor.{name:<22} {text}" + (f" (default: {default!r})" if default not in ("", None) else ""))
    parser = argparse.ArgumentParser(
        prog="python -m rslkit.deploy.ros2",
        description="Drive a robot from an exported rslkit ONNX policy (ROS 2 parameters after --ros-args; see "
        "docs/ros2.md).",
        epilog="actor mode (real-world RL; docs/ros2.md), --actor.<field> VALUE:\n" + "\n".join(flags),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policy", help="the exported .onnx policy (overrides the policy_path parameter)")
    parser.add_argument("--node-name", default="rslkit_policy", help="ROS node name")
    return parser.parse_known_args(list(argv))


def robot_actor_cfg(overrides: list[str]) -> RobotActorCfg | None:
    """The actor mode's settings from the ``--actor.*`` overrides (None without any).

    Raises:
        ValueError: another flag, actor flags without ``--actor.learner``, or bad values.
    """
    if not overrides:
        return None
    cfg = RobotActorCfg()
    apply_overrides({"actor": cfg}, overrides)
    if not cfg.learner:
        given = sorted({t.split("=")[0] for t in overrides if t.startswith("--actor.")})
        raise ValueError(f"{', '.join(given)} need --actor.learner HOST:PORT (the actor mode is off without).")
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
    args, overrides = _parse(remove_ros_args(["rslkit-ros2", *argv])[1:])
    try:
        actor = robot_actor_cfg(overrides)
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
