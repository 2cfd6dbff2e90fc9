"""(task, algorithm) -> default agent config: the recipe that trains a task with an algorithm.

Built-in tasks keep their recipes in one module each (``rslkit/recipes/<task>.py``: a ``RECIPES`` dict, and an
``ENV_SETTINGS`` dict where a recipe needs other env settings than the task's defaults);
``gym:<EnvId>`` tasks get Stable-Baselines3 zoo's settings (:mod:`rslkit.recipes.gym`); a user's task adds its own
in a ``RECIPES`` dict of its module (``--task package.module:attribute``) or with :func:`register_recipe`, or
trains with the algorithm's default config.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from rslkit.envs.registry import BUILTIN_TASKS, is_user_task
from rslkit.recipes.algorithms import get_algorithm

BUILTIN_RECIPES: dict[str, str] = {task: module.rsplit(".", 1)[1] for task, module in BUILTIN_TASKS.items()}
"""Built-in task name -> module of ``rslkit.recipes`` that holds its ``RECIPES`` (named like the task's module in
``rslkit.envs.tasks``: one table of built-in tasks, the registry's)."""

_REGISTERED: dict[str, dict[str, Callable[[], Any]]] = {}


def register_recipe(task: str, algo: str, factory: Callable[[], Any]) -> None:
    """Make ``factory()`` the default agent config of ``task`` trained with ``algo`` (replaces an earlier one).

    Raises:
        ValueError: for an unknown algorithm.
    """
    get_algorithm(algo)
    _REGISTERED.setdefault(task, {})[algo] = factory


def _recipe_module(task: str) -> Any:
    """The module that holds ``task``'s ``RECIPES``: its ``rslkit.recipes`` module, or the user's own module of a
    ``module:attribute`` task; None for other tasks."""
    if task in BUILTIN_RECIPES:
        return importlib.import_module(f"rslkit.recipes.{BUILTIN_RECIPES[task]}")
    if is_user_task(task):
        return importlib.import_module(task.partition(":")[0])
    return None


def recipes_of(task: str) -> dict[str, Callable[[], Any]]:
    """Algorithm name -> agent-config factory of ``task``: the ``RECIPES`` of its module (built-in task, or the
    module of a ``module:attribute`` task), ``gym:`` defaults, then :func:`register_recipe` entries."""
    out: dict[str, Callable[[], Any]] = {}
    module = _recipe_module(task)
    if module is not None:
        out.update(getattr(module, "RECIPES", {}))
    elif task.startswith("gym:"):
        from rslkit.recipes.gym import gym_recipes

        out.update(gym_recipes(task[len("gym:") :]))
    out.update(_REGISTERED.get(task, {}))
    return out


def env_settings(task: str, algo: str) -> dict[str, Any]:
    """Env-config settings the ``algo`` recipe of ``task`` needs (``ENV_SETTINGS`` of its recipe module: algorithm
    -> ``{field path: typed value}``, e.g. ``{"sac": {"action_type": "continuous"}}``); applied with
    :func:`rslkit.utils.config.apply_settings` before the user's ``--env.*`` overrides.

    Raises:
        ValueError: a module that still defines ``ENV_OVERRIDES`` (command-line tokens, replaced by ``ENV_SETTINGS``).
    """
    module = _recipe_module(task)
    if module is None:
        return {}
    if hasattr(module, "ENV_OVERRIDES"):
        raise ValueError(
            f"{module.__name__}.ENV_OVERRIDES (command-line tokens) is no longer read: write the recipe's env settings "
            'as ENV_SETTINGS = {"<algo>": {"<field>": value}}, e.g. {"sac": {"action_type": "continuous"}}.'
        )
    return dict(getattr(module, "ENV_SETTINGS", {}).get(algo, {}))


def agent_cfg(task: str, algo: str) -> Any:
    """A fresh default agent config for training ``task`` with ``algo``, checked to fit the algorithm's runner.

    A task without any recipe (a user's own, see docs/custom_tasks.md) trains with the algorithm's default
    config; a note on stderr says so.

    Raises:
        ValueError: unknown algorithm; a built-in or ``gym:`` task with no recipe for ``algo``; a recipe that
            returns another config class than the runner takes.
    """
    cfg_cls, _ = get_algorithm(algo)
    recipes = recipes_of(task)
    if algo not in recipes:
        if recipes or task in BUILTIN_RECIPES:
            raise ValueError(f"Task '{task}' has no '{algo}' recipe; available: {', '.join(sorted(recipes))}.")
        print(
            f"note: task '{task}' registers no '{algo}' recipe; training with {cfg_cls.__name__}() defaults "
            "(add one with rslkit.recipes.register_recipe).",
            file=sys.stderr,
        )
        return cfg_cls()
    cfg = recipes[algo]()
    if not isinstance(cfg, cfg_cls):
        raise ValueError(
            f"The '{algo}' recipe of task '{task}' returns a {type(cfg).__name__}; the {algo} runner takes a "
            f"{cfg_cls.__name__}."
        )
    return cfg


def recipe_pairs() -> list[tuple[str, str]]:
    """Every built-in (task, algorithm) pair with a recipe, sorted."""
    return sorted((task, algo) for task in BUILTIN_RECIPES for algo in recipes_of(task))
