"""``--sim mujoco|warp``: choose the physics backend of a MuJoCo task from the command line (train, play, record).

The choice is applied by :func:`rslkit.recipes.run.apply_sim`.
"""

from __future__ import annotations

import argparse

SIM_HELP = (
    "physics backend of a MuJoCo task: mujoco (C MuJoCo on CPU threads, the default) or warp (MuJoCo Warp; "
    "use with --device cuda, needs pip install -e '.[warp]')"
)


def add_sim_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--sim NAME`` (default: the task config's own choice)."""
    parser.add_argument("--sim", help=SIM_HELP)
