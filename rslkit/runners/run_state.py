"""The part of a checkpoint every runner shares: RNG state, env state and episode statistics."""

from __future__ import annotations

from typing import Any

from rslkit.envs.vec_env import VecEnv
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.utils.seeding import rng_state, set_rng_state


def capture_run_state(env: VecEnv, stats: EpisodeStats) -> dict[str, Any]:
    """``{"rng", "env_state", "episode_stats"}`` for a checkpoint (``env_state`` is None for envs without
    ``state_dict``, whose resume is then not bit-exact)."""
    state_dict = getattr(env, "state_dict", None)
    return {
        "rng": rng_state(),
        "env_state": state_dict() if state_dict is not None else None,
        "episode_stats": stats.state_dict(),
    }


def restore_run_state(data: dict[str, Any], env: VecEnv, stats: EpisodeStats) -> None:
    """Restore what :func:`capture_run_state` saved (the env state only where both sides support it)."""
    set_rng_state(data["rng"])
    if data.get("env_state") is not None and hasattr(env, "load_state_dict"):
        env.load_state_dict(data["env_state"])
    stats.load_state_dict(data["episode_stats"])
