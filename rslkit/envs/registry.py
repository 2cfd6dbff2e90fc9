"""Task registry: one name maps to one env config and one default agent config per algorithm."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rslkit.envs.vec_env import VecEnv


@dataclass
class TaskSpec:
    """How to build a registered task and train it."""

    name: str
    env_cfg: Callable[[], Any]
    """Returns a fresh env config dataclass."""
    make_env: Callable[[Any, str], VecEnv]
    """``make_env(env_cfg, device)`` builds the environment."""
    agent_cfgs: dict[str, Callable[[], Any]] = field(default_factory=dict)
    """Default agent config per algorithm name (``"ppo"``, ...)."""
    description: str = ""


_REGISTRY: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> None:
    """Add a task; names are unique."""
    if spec.name in _REGISTRY:
        raise ValueError(f"Task '{spec.name}' is already registered.")
    _REGISTRY[spec.name] = spec


def _load_builtin_tasks() -> None:
    import rslkit.envs.tasks  # noqa: F401  (registers the built-in tasks)


def task_names() -> list[str]:
    """Names of all registered tasks, sorted."""
    _load_builtin_tasks()
    return sorted(_REGISTRY)


def get_task(name: str) -> TaskSpec:
    """Look up a task by name.

    Raises:
        ValueError: for an unknown name, listing close matches and all registered tasks.

    Names ``gym:<EnvId>`` wrap any Gymnasium env (:mod:`rslkit.envs.gym_adapter`).
    """
    if name.startswith("gym:"):
        from rslkit.envs.gym_adapter import gym_task_spec

        return gym_task_spec(name)
    _load_builtin_tasks()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown task '{name}'.{hint} Registered tasks: {', '.join(sorted(_REGISTRY))}; "
            "any Gymnasium env works as 'gym:<EnvId>'."
        )
    return _REGISTRY[name]


def make_env(name: str, device: str | torch.device = "cpu", **overrides: Any) -> VecEnv:
    """Build a registered task with its default config, fields overridden by keyword (e.g. ``num_envs=64``)."""
    spec = get_task(name)
    cfg = spec.env_cfg()
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise ValueError(f"Task '{name}' config has no field '{key}'.")
        setattr(cfg, key, value)
    return spec.make_env(cfg, str(device))
