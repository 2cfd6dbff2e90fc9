"""The scripted "human" of a task: its scripted expert (``TaskSpec.expert``, :mod:`rslkit.envs.expert`) taking over
when the policy leaves the corridor around the goal or stalls (``TaskSpec.goal_distance``)."""

from __future__ import annotations

from typing import Any

from rslkit.envs.registry import distance_for, expert_for
from rslkit.realworld.interventions import ScriptedHuman


def scripted_human_for(task: str, env_cfg: Any = None, **kwargs: Any) -> ScriptedHuman:
    """A :class:`~rslkit.realworld.interventions.ScriptedHuman` with ``task``'s expert and distance to the goal;
    ``kwargs`` go to it (default triggers: no progress of 5 mm (or 5 mrad) for 15 steps; takeovers of 20 steps).

    Raises:
        ValueError: the task has no scripted expert or no distance to the goal.
    """
    expert = expert_for(task, env_cfg)
    options: dict[str, Any] = {"stall_steps": 15, "min_progress": 0.005, **kwargs}
    return ScriptedHuman(expert, distance=distance_for(task, env_cfg), **options)
