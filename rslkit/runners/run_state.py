"""The part of a checkpoint every runner shares: RNG state, env state and episode statistics, as plain data (tensors,
tuples and numbers: see :mod:`rslkit.utils.checkpoint`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rslkit.envs.vec_env import VecEnv
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.utils.seeding import rng_state, set_rng_state


def _plain_rng_state() -> dict[str, Any]:
    """:func:`rng_state` with NumPy's ``(name, keys: uint32 [624], pos, has_gauss, cached_gaussian)`` keys as an
    int64 tensor (an ``ndarray`` is not plain data); Python's state is a tuple of ints already."""
    state = rng_state()
    name, keys, pos, has_gauss, cached = state["numpy"]
    state["numpy"] = (str(name), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    return state


def _set_plain_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`_plain_rng_state` output (or a version-1 checkpoint's, whose NumPy keys are an ``ndarray``)."""
    name, keys, pos, has_gauss, cached = state["numpy"]
    set_rng_state({**state, "numpy": (name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached)})


def capture_run_state(env: VecEnv, stats: EpisodeStats) -> dict[str, Any]:
    """``{"rng", "env_state", "episode_stats"}`` for a checkpoint (``env_state`` is None for envs without
    ``state_dict``, whose resume is then not bit-exact)."""
    state_dict = getattr(env, "state_dict", None)
    return {
        "rng": _plain_rng_state(),
        "env_state": state_dict() if state_dict is not None else None,
        "episode_stats": stats.state_dict(),
    }


def restore_run_state(data: dict[str, Any], env: VecEnv, stats: EpisodeStats) -> None:
    """Restore what :func:`capture_run_state` saved (the env state only where both sides support it)."""
    _set_plain_rng_state(data["rng"])
    if data.get("env_state") is not None and hasattr(env, "load_state_dict"):
        env.load_state_dict(data["env_state"])
    stats.load_state_dict(data["episode_stats"])
