"""Task registry: one name maps to one :class:`~rslkit.envs.task_spec.TaskSpec` (env config, env factory, task
knowledge).

Names resolve in this order:

- ``gym:<EnvId>``: any Gymnasium env (:mod:`rslkit.envs.gym_adapter`);
- ``package.module:attribute``: a user's own task, no registration needed; the attribute is a :class:`TaskSpec`
  or a function returning one (``python train.py --task my_robot.tasks:reach``), loaded by
  :func:`rslkit.utils.plugins.load_plugin`;
- a built-in name: :data:`BUILTIN_TASKS`, a static table of the modules that define each task's ``TASK``, imported
  when the task is first asked for (no import statement joins the registry and a task module, either way);
- a registered name: tasks of installed packages that declare an entry point in the ``rslkit.tasks`` group (the
  entry point names a module to import, which calls :func:`register_task`), and tasks registered by code that
  already ran.

Agent configs (which algorithm settings train a task) live above the runners, in :mod:`rslkit.recipes`.
"""

from __future__ import annotations

import dataclasses
import difflib
from importlib.metadata import entry_points
from typing import Any

import torch

from rslkit.envs.expert import Expert, GoalDistance
from rslkit.envs.gym_adapter import GYM_PREFIX, gym_task_spec
from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.vec_env import VecEnv
from rslkit.utils.plugins import load_plugin

__all__ = [
    "BUILTIN_TASKS",
    "TaskSpec",
    "distance_for",
    "expert_for",
    "get_task",
    "is_user_task",
    "make_env",
    "register_task",
    "task_names",
]

ENTRY_POINT_GROUP = "rslkit.tasks"
"""Installed packages list modules that register tasks under this entry-point group (see docs/custom_tasks.md)."""

BUILTIN_TASKS: dict[str, str] = {
    "cartpole": "rslkit.envs.tasks.cartpole",
    "cartpole-swingup": "rslkit.envs.tasks.cartpole_swingup",
    "go2-flat": "rslkit.envs.tasks.go2_flat",
    "go2-rough": "rslkit.envs.tasks.go2_rough",
    "pendulum": "rslkit.envs.tasks.pendulum",
    "point-reach": "rslkit.envs.tasks.point_reach",
    "so101-lift": "rslkit.envs.tasks.so101_lift",
    "so101-pick-place": "rslkit.envs.tasks.so101_pick_place",
    "so101-reach": "rslkit.envs.tasks.so101_reach",
}
"""Built-in task name -> module whose ``TASK`` is its :class:`TaskSpec` (imported when the task is asked for)."""

_REGISTRY: dict[str, TaskSpec] = {}
_entry_points_loaded = False


def register_task(spec: TaskSpec) -> None:
    """Add a task (a plug-in package's, through its ``rslkit.tasks`` entry point); names are unique.

    Raises:
        ValueError: the name is taken (by a built-in or registered task), or contains ``:`` (reserved for
            ``gym:`` and ``module:attribute``).
    """
    if ":" in spec.name:
        raise ValueError(f"Task name '{spec.name}' contains ':', which marks gym:<EnvId> and module:attribute names.")
    if spec.name in _REGISTRY or spec.name in BUILTIN_TASKS:
        raise ValueError(f"Task '{spec.name}' is already registered.")
    _REGISTRY[spec.name] = spec


def _load_entry_points() -> None:
    """Import the modules of the ``rslkit.tasks`` entry points (once)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as err:  # a broken plug-in must say which one it is
            raise ValueError(
                f"Entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}) failed to load: {err!r}"
            ) from err


def task_names() -> list[str]:
    """Names of all built-in and registered tasks, sorted."""
    _load_entry_points()
    return sorted({*BUILTIN_TASKS, *_REGISTRY})


def _user_task(name: str) -> TaskSpec:
    """The :class:`TaskSpec` a ``package.module:attribute`` name loads (calling a function that returns one)."""
    spec = load_plugin(name, "--task")
    if callable(spec) and not isinstance(spec, TaskSpec):
        spec = spec()
    if not isinstance(spec, TaskSpec):
        raise ValueError(
            f"--task {name} is a {type(spec).__name__}; the attribute must be a rslkit.envs.TaskSpec or a function "
            "returning one."
        )
    if spec.name != name:
        spec = dataclasses.replace(spec, name=name)  # checkpoints record what rebuilds it
    return spec


def is_user_task(name: str) -> bool:
    """Whether ``name`` is a ``module:attribute`` task (a user's module, not registered)."""
    return ":" in name and not name.startswith("gym:")


def get_task(name: str) -> TaskSpec:
    """Look up a task by name (see the module docstring for the forms a name takes).

    Raises:
        ValueError: for an unknown name, listing close matches and all tasks.
    """
    if name.startswith(GYM_PREFIX):
        return gym_task_spec(name)
    if is_user_task(name):
        return _user_task(name)
    if name in BUILTIN_TASKS:
        return load_plugin(f"{BUILTIN_TASKS[name]}:TASK", "--task")
    _load_entry_points()
    if name not in _REGISTRY:
        names = task_names()
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown task '{name}'.{hint} Registered tasks: {', '.join(names)}; "
            "any Gymnasium env works as 'gym:<EnvId>', your own as 'package.module:attribute'."
        )
    return _REGISTRY[name]


def expert_for(task: str, env_cfg: Any = None) -> Expert:
    """The scripted expert of ``task`` (``TaskSpec.expert``) for the env config ``env_cfg`` (default the task's).

    Raises:
        ValueError: the task has no expert; the message lists the tasks that have one.
    """
    spec = get_task(task)
    if spec.expert is None:
        raise ValueError(f"No scripted expert for task '{task}'; there are experts for {_tasks_with('expert')}.")
    return spec.expert(env_cfg)


def distance_for(task: str, env_cfg: Any = None) -> GoalDistance:
    """``task``'s distance to the goal of one observation (``TaskSpec.goal_distance``), 0 once solved.

    Raises:
        ValueError: the task has none; the message lists the tasks that have one.
    """
    spec = get_task(task)
    if spec.goal_distance is None:
        raise ValueError(f"No distance to the goal for task '{task}'; there is one for {_tasks_with('goal_distance')}.")
    return spec.goal_distance(env_cfg)


def _tasks_with(field: str) -> list[str]:
    """The tasks whose spec sets ``field``."""
    return [n for n in task_names() if getattr(get_task(n), field) is not None]


def make_env(name: str, device: str | torch.device = "cpu", **overrides: Any) -> VecEnv:
    """Build a task with its default config, fields overridden by keyword (e.g. ``num_envs=64``)."""
    spec = get_task(name)
    cfg = spec.env_cfg()
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise ValueError(f"Task '{name}' config has no field '{key}'.")
        setattr(cfg, key, value)
    return spec.make_env(cfg, str(device))
