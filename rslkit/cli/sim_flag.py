"""``--sim mujoco|warp``: choose the physics backend of a MuJoCo task from the command line (train.py, play.py)."""

from __future__ import annotations

import argparse

SIM_HELP = (
    "physics backend of a MuJoCo task: mujoco (C MuJoCo on CPU threads, the default) or warp (MuJoCo Warp; "
    "use with --device cuda, needs pip install -e '.[warp]')"
)


def add_sim_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--sim NAME`` (default: the task config's own choice)."""
    parser.add_argument("--sim", help=SIM_HELP)


def apply_sim(env_cfg: object, sim: str | None, task: str) -> None:
    """Set ``env_cfg.sim`` to ``sim`` (nothing when None).

    Raises:
        ValueError: the task's config has no ``sim`` field (not a MuJoCo task), or ``sim`` is not a known backend.
    """
    if sim is None:
        return
    if not hasattr(env_cfg, "sim"):
        raise ValueError(
            f"--sim applies to MuJoCo tasks (their config has a 'sim' field); task '{task}' "
            f"({type(env_cfg).__name__}) simulates its own physics. Drop --sim."
        )
    from rslkit.envs.mujoco.factory import SIM_BACKENDS

    if sim not in SIM_BACKENDS:
        raise ValueError(f"--sim must be one of {', '.join(SIM_BACKENDS)}, got '{sim}'.")
    env_cfg.sim = sim  # type: ignore[attr-defined]
