"""Task registry: one name maps to one env config and the factory that builds the env.

Names resolve in this order:

- ``gym:<EnvId>``: any Gymnasium env (:mod:`rslkit.envs.gym_adapter`);
- ``package.module:attribute``: a user's own task, no registration needed; the attribute is a :class:`TaskSpec`
  or a function returning one (``python train.py --task my_robot.tasks:reach``);
- a registered name: the built-in tasks, tasks of installed packages that declare an entry point in the
  ``rslkit.tasks`` group (the entry point names a module to import, which calls :func:`register_task`), and
  tasks registered by code that already ran.

Agent configs (which algorithm settings train a task) live above the runners, in :mod:`rslkit.recipes`.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import torch

from rslkit.envs.vec_env import VecEnv

ENTRY_POINT_GROUP = "rslkit.tasks"
"""Installed packages list modules that register tasks under this entry-point group (see docs/custom_tasks.md)."""


@dataclass
class TaskSpec:
    """How to build a task: its env config and the factory that makes the env from it."""

    name: str
    env_cfg: Callable[[], Any]
    """Returns a fresh env config dataclass."""
    make_env: Callable[[Any, str], VecEnv]
    """``make_env(env_cfg, device)`` builds the environment."""
    description: str = ""


_REGISTRY: dict[str, TaskSpec] = {}
_loaded = False


def register_task(spec: TaskSpec) -> None:
    """Add a task; names are unique.

    Raises:
        ValueError: the name is taken, or contains ``:`` (reserved for ``gym:`` and ``module:attribute``).
    """
    if ":" in spec.name:
        raise ValueError(f"Task name '{spec.name}' contains ':', which marks gym:<EnvId> and module:attribute names.")
    if spec.name in _REGISTRY:
        raise ValueError(f"Task '{spec.name}' is already registered.")
    _REGISTRY[spec.name] = spec


def _load_tasks() -> None:
    """Import the built-in tasks and the modules of the ``rslkit.tasks`` entry points (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import rslkit.envs.tasks  # noqa: F401  (registers the built-in tasks)

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as err:  # a broken plug-in must say which one it is
            raise ValueError(
                f"Entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}) failed to load: {err!r}"
            ) from err


def task_names() -> list[str]:
    """Names of all registered tasks, sorted."""
    _load_tasks()
    return sorted(_REGISTRY)


def _user_task(name: str) -> TaskSpec:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ValueError(
            f"Task '{name}': cannot import module '{module_name}' ({err}). A module:attribute task must be "
            "importable: install its package or run from the folder that holds it."
        ) from None
    if not hasattr(module, attr):
        raise ValueError(f"Task '{name}': module '{module_name}' has no attribute '{attr}'.")
    spec = getattr(module, attr)
    if callable(spec) and not isinstance(spec, TaskSpec):
        spec = spec()
    if not isinstance(spec, TaskSpec):
        raise ValueError(
            f"Task '{name}' is a {type(spec).__name__}; '{attr}' must be a rslkit.envs.TaskSpec or a function "
            "returning one."
        )
    if spec.name != name:
        spec = TaskSpec(name, spec.env_cfg, spec.make_env, spec.description)  # checkpoints record what rebuilds it
    return spec


def is_user_task(name: str) -> bool:
    """Whether ``name`` is a ``module:attribute`` task (a user's module, not registered)."""
    return ":" in name and not name.startswith("gym:")


def get_task(name: str) -> TaskSpec:
    """Look up a task by name (see the module docstring for the forms a name takes).

    Raises:
        ValueError: for an unknown name, listing close matches and all registered tasks.
    """
    if name.startswith("gym:"):
        from rslkit.envs.gym_adapter import gym_task_spec

        return gym_task_spec(name)
    if is_user_task(name):
        return _user_task(name)
    _load_tasks()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown task '{name}'.{hint} Registered tasks: {', '.join(sorted(_REGISTRY))}; "
            "any Gymnasium env works as 'gym:<EnvId>', your own as 'package.module:attribute'."
        )
    return _REGISTRY[name]


def make_env(name: str, device: str | torch.device = "cpu", **overrides: Any) -> VecEnv:
    """Build a task with its default config, fields overridden by keyword (e.g. ``num_envs=64``)."""
    spec = get_task(name)
    cfg = spec.env_cfg()
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise ValueError(f"Task '{name}' config has no field '{key}'.")
        setattr(cfg, key, value)
    return spec.make_env(cfg, str(device))
