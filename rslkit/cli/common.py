"""Pieces shared by the command-line entry points (importing this module loads no torch: rslkit.plot uses it)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable


def tasks_epilog() -> str:
    """Help text listing every registered task."""
    from rslkit.envs.registry import get_task, task_names  # here: run_cli serves torch-free commands (rslkit.plot)

    lines = ["registered tasks:"]
    for name in task_names():
        lines.append(f"  {name:<20s} {get_task(name).description}")
    lines.append("")
    lines.append("Any config field can be overridden: --env.<field> VALUE, --agent.<group>.<field> VALUE")
    lines.append("(e.g. --agent.algorithm.learning_rate 3e-4 --agent.policy.actor_hidden_dims 128,128).")
    return "\n".join(lines)


def resolve_device(device: str) -> str:
    """Validate the ``--device`` flag.

    Raises:
        ValueError: when CUDA is requested but not available.
    """
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device} requested but CUDA is not available; use --device cpu.")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"--device must be 'cpu' or 'cuda[:i]', got '{device}'.")
    return device


def make_parser(description: str) -> argparse.ArgumentParser:
    """An argparse parser whose --help lists the registered tasks."""
    return argparse.ArgumentParser(
        description=description, epilog=tasks_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter
    )


def run_cli(main: Callable[[], object]) -> None:
    """Run a command-line entry point; bad input (a ``ValueError``, a missing file, an output that exists) ends with
    its message and exit code 2 instead of a traceback.

    Set ``RSLKIT_TRACEBACK=1`` to see the full traceback.
    """
    try:
        main()
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        if os.environ.get("RSLKIT_TRACEBACK"):
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
