"""What one task is: its env config, the factory of its env, and the task knowledge beside them (scripted expert,
success test on observations).

Every built-in task module defines one ``TASK = TaskSpec(...)``; :mod:`rslkit.envs.registry` maps task names to
those modules. A user's task module does the same (``--task package.module:attribute``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rslkit.envs.expert import Expert, GoalDistance
from rslkit.envs.vec_env import VecEnv


@dataclass
class TaskSpec:
    """How to build a task: its env config and the factory that makes the env from it, plus what the task knows
    about solving itself."""

    name: str
    env_cfg: Callable[[], Any]
    """Returns a fresh env config dataclass."""
    make_env: Callable[[Any, str], VecEnv]
    """``make_env(env_cfg, device)`` builds the environment."""
    description: str = ""
    expert: Callable[[Any], Expert] | None = None
    """``expert(env_cfg or None)``: the task's scripted expert (:mod:`rslkit.envs.expert`), which reads the
    observation by its column names; None for tasks without one."""
    goal_distance: Callable[[Any], GoalDistance] | None = None
    """``goal_distance(env_cfg or None)``: the task's success test on one env's observation, as a distance to the
    goal that is 0 once solved (a scripted human's corridor and stall trigger); None for tasks without one."""
