"""Human interventions: the source interface, per-episode counters, and a scripted "human" for tests and benchmarks.

An intervention source watches every control step and may replace the policy's action: a person on a keyboard or
gamepad (:mod:`rslkit.realworld.teleop`), or :class:`ScriptedHuman`, an expert policy that takes over when the
policy leaves a corridor or stalls (HIL-SERL's human, scripted). The actor stores a replaced step as an
intervention transition (it goes to both the online and the demonstration buffer).

numpy only: the robot side (no torch) uses it. The observation and expert types are the tasks' own
(:mod:`rslkit.envs.expert`), imported for type checking only, since importing ``rslkit.envs`` loads torch. Here an
observation is one env's groups, no batch dimension: ``{"policy": [D]}``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from rslkit.envs.expert import Expert, Observation


class InterventionSource(Protocol):
    """Something that can take over from the policy, one env at a time."""

    def reset(self) -> None:
        """Called at the start of every episode."""

    def __call__(self, obs: Observation, policy_action: np.ndarray) -> np.ndarray | None:
        """The action to apply instead of ``policy_action [A]`` (in the policy's ``[-1, 1]`` range), or None when
        the human is not intervening. A returned action labels the transition an intervention."""


class InterventionCounter:
    """Log-friendly intervention counters of the current episode and of all episodes so far."""

    def __init__(self) -> None:
        self.episodes = 0
        self.total_steps = 0
        self.total_intervention_steps = 0
        self.total_interventions = 0
        self._new_episode()

    def _new_episode(self) -> None:
        self.steps = 0
        self.intervention_steps = 0
        self.interventions = 0
        self._active = False

    def start_episode(self) -> None:
        """Begin counting a new episode."""
        self.episodes += 1
        self._new_episode()

    def count(self, intervening: bool) -> None:
        """Count one step; a step that intervenes after one that did not starts a new intervention."""
        self.steps += 1
        self.total_steps += 1
        if intervening:
            self.intervention_steps += 1
            self.total_intervention_steps += 1
            if not self._active:
                self.interventions += 1
                self.total_interventions += 1
        self._active = intervening

    def episode_stats(self) -> dict[str, float]:
        """``interventions`` (takeovers started), ``intervention_steps``, ``steps`` and ``intervention_rate``
        (share of steps) of the current episode, plus ``episodes`` and ``total_intervention_rate``."""
        return {
            "interventions": float(self.interventions),
            "intervention_steps": float(self.intervention_steps),
            "steps": float(self.steps),
            "intervention_rate": self.intervention_steps / max(self.steps, 1),
            "episodes": float(self.episodes),
            "total_intervention_rate": self.total_intervention_steps / max(self.total_steps, 1),
        }


def as_action(action: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``action`` as a float32 array shaped like the policy's action, clipped to ``[-1, 1]``.

    Raises:
        ValueError: the shape differs from the policy's action, or the action is not finite.
    """
    out = np.asarray(action, dtype=np.float32)
    if out.shape != np.shape(like):
        raise ValueError(f"Intervention action has shape {list(out.shape)}, the policy's {list(np.shape(like))}.")
    if not np.isfinite(out).all():
        raise ValueError(f"Intervention action is not finite: {out.tolist()}.")
    return np.clip(out, -1.0, 1.0)


class ScriptedHuman:
    """An expert that takes over when the state leaves a corridor or the policy stalls, and hands back later.

    Each step, unless it is already in control, the human checks its triggers (after ``grace_steps`` of the
    episode, outside a cooldown, while fewer than ``max_takeovers`` takeovers happened):

    - leaving the corridor: ``corridor(obs)`` is False (a predicate: True inside), or, for a number ``corridor``,
      ``distance(obs) > corridor``;
    - stall: ``distance(obs)`` has not improved on its best value of this takeover-free stretch by ``min_progress``
      for ``stall_steps`` steps (distances at or below ``goal_distance`` count as progress: no stall at the goal).

    A trigger starts a takeover with probability ``takeover_prob * prob_decay ** episode`` (seeded; a declined
    trigger starts the cooldown, so it is not redrawn every step). A takeover lasts ``max_takeover_steps`` steps
    of expert actions, then control returns to the policy for at least ``cooldown_steps`` steps, with the stall
    detector restarted.

    Args:
        expert: observation groups -> action ``[A]`` in ``[-1, 1]``.
        corridor: a predicate (True while the state is acceptable), a distance threshold, or None.
        stall_steps: steps without progress that trigger a takeover; None: no stall trigger.
        max_takeover_steps: length of a takeover.
        distance: distance to the goal (any unit), for a threshold corridor and stall detection.
    """

    def __init__(
        self,
        expert: Expert,
        corridor: Callable[[Observation], bool] | float | None = None,
        stall_steps: int | None = None,
        max_takeover_steps: int = 20,
        *,
        distance: Callable[[Observation], float] | None = None,
        min_progress: float = 1e-3,
        goal_distance: float = 0.0,
        cooldown_steps: int = 10,
        grace_steps: int = 0,
        max_takeovers: int | None = None,
        takeover_prob: float = 1.0,
        prob_decay: float = 1.0,
        seed: int = 0,
    ) -> None:
        threshold = corridor is not None and not callable(corridor)
        if (threshold or stall_steps is not None) and distance is None:
            raise ValueError("A distance corridor and stall_steps need a distance(obs) function.")
        if corridor is None and stall_steps is None:
            raise ValueError("Give the scripted human a trigger: a corridor or stall_steps.")
        for name, value in (("max_takeover_steps", max_takeover_steps), ("stall_steps", stall_steps or 1)):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value}.")
        if min(cooldown_steps, grace_steps) < 0:
            raise ValueError(f"cooldown_steps and grace_steps must be >= 0, got {cooldown_steps}, {grace_steps}.")
        if not (0.0 <= takeover_prob <= 1.0 and 0.0 <= prob_decay <= 1.0):
            raise ValueError(f"takeover_prob and prob_decay must be in [0, 1], got {takeover_prob}, {prob_decay}.")
        self.expert, self.distance = expert, distance
        self.corridor: Callable[[Observation], bool] | None = None
        self.max_distance: float | None = None
        if callable(corridor):
            self.corridor = corridor
        elif corridor is not None:
            self.max_distance = float(corridor)
        self.stall_steps = stall_steps
        self.min_progress, self.goal_distance = min_progress, goal_distance
        self.max_takeover_steps, self.cooldown_steps, self.grace_steps = max_takeover_steps, cooldown_steps, grace_steps
        self.max_takeovers = max_takeovers
        self.takeover_prob, self.prob_decay = takeover_prob, prob_decay
        self.counter = InterventionCounter()
        self._rng = random.Random(seed)
        self._started = False
        self._begin_episode()

    def _begin_episode(self) -> None:
        self._takeover_left = 0
        self._cooldown = 0
        self._best = float("inf")
        self._since_progress = 0
        self._declined = 0

    @property
    def current_takeover_prob(self) -> float:
        """Probability that a trigger starts a takeover in this episode."""
        return self.takeover_prob * self.prob_decay ** max(self.counter.episodes - 1, 0)

    def reset(self) -> None:
        """Start a new episode: counters, stall detector and takeover state."""
        self._started = True
        self.counter.start_episode()
        self._begin_episode()

    def __call__(self, obs: Observation, policy_action: np.ndarray) -> np.ndarray | None:
        """The expert's action while it has taken over, else None."""
        if not self._started:
            self.reset()
        if self._takeover_left == 0 and not self._triggered(obs):
            self.counter.count(False)
            return None
        self._takeover_left -= 1
        if self._takeover_left == 0:  # last step of this takeover: hand back afterwards
            self._cooldown = self.cooldown_steps
            self._best, self._since_progress = float("inf"), 0
        self.counter.count(True)
        return as_action(self.expert(obs), policy_action)

    def _triggered(self, obs: Observation) -> bool:
        """Whether a takeover starts now (updates the stall detector, cooldown and the random draw)."""
        stalled = self._update_progress(obs)
        if self._cooldown > 0:
            self._cooldown -= 1
            return False
        if self.counter.steps < self.grace_steps:
            return False
        if self.max_takeovers is not None and self.counter.interventions >= self.max_takeovers:
            return False
        if not (stalled or self._outside(obs)):
            return False
        if self._rng.random() >= self.current_takeover_prob:
            self._declined += 1
            self._cooldown = self.cooldown_steps
            self._best, self._since_progress = float("inf"), 0
            return False
        self._takeover_left = self.max_takeover_steps
        return True

    def _outside(self, obs: Observation) -> bool:
        if self.corridor is not None and not self.corridor(obs):
            return True
        return self.max_distance is not None and self._distance(obs) > self.max_distance

    def _update_progress(self, obs: Observation) -> bool:
        """Track the best distance; True when it has not improved for ``stall_steps`` steps."""
        if self.stall_steps is None:
            return False
        d = self._distance(obs)
        if d <= self.goal_distance or d < self._best - self.min_progress:
            self._best, self._since_progress = min(d, self._best), 0
            return False
        self._since_progress += 1
        return self._since_progress >= self.stall_steps

    def _distance(self, obs: Observation) -> float:
        return float(self.distance(obs)) if self.distance is not None else 0.0

    def episode_stats(self) -> dict[str, float]:
        """The counters of :class:`InterventionCounter`, plus ``declined`` triggers and ``takeover_prob`` of this
        episode."""
        return {
            **self.counter.episode_stats(),
            "declined": float(self._declined),
            "takeover_prob": self.current_takeover_prob,
        }
