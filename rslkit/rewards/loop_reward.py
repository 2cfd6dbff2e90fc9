"""The local progress critic as the real-world actor's reward plug-in (``--actor.reward``).

``--actor.reward rslkit.rewards.loop_reward:from_env()`` builds a :class:`LoopProgressReward` from environment
variables (the plug-in syntax takes no arguments): ``RSLKIT_REWARD_MODEL`` (a ``model.safetensors`` written by
``python -m rslkit.rewards train``, required), ``RSLKIT_REWARD_GOAL`` (default: the goal it was trained on),
``RSLKIT_REWARD_DEAD_BAND`` (default 0.02), ``RSLKIT_REWARD_SCALE`` (default 1: an episode's return is at most 1;
SAC's entropy temperature is tuned against the reward's scale), ``RSLKIT_REWARD_DONE_BONUS`` (default 0),
``RSLKIT_REWARD_PROGRESS_WEIGHT`` (default 1; 0 with a done bonus: the success-classifier reward) and
``RSLKIT_REWARD_ACCUMULATE`` (``vlac``, the default, or ``sum``; all: see :class:`~rslkit.rewards.value.ValueCfg`).
It runs in the actor's spool-writer thread, once per spooled batch, off the control loop, and needs torch on the
actor's machine; a robot computer without torch serves a critic instead (docs/rewards.md, "Served critics").

Each transition ``(obs, next_obs)`` is scored by the critic; VLAC's recursion (or the sum) keeps one value per
episode, and the reward is its increment. The episode itself ends as the env decides: the done probability is not
applied here.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.rewards.progress_model import default_goal, load_progress_model
from rslkit.rewards.value import ACCUMULATE, apply_dead_band, check_reward_weights, value_step


class LoopProgressReward:
    """``reward_fn(batch: TransitionBatch) -> rewards [N]`` from a local progress critic.

    Args:
        model_path: the critic.
        goal: language goal (default: the one goal it was trained on).
        dead_band: ``|delta|`` below this counts as no progress.
        scale, done_bonus, progress_weight: rewards are
            ``scale * (progress_weight * (v_t - v_{t-1}) + done_bonus * done(next_obs))``.
        accumulate: ``vlac`` (VLAC's recursion) or ``sum`` (see :class:`~rslkit.rewards.value.ValueCfg`).

    Raises:
        ValueError: a critic that reads camera groups (images do not travel in transitions yet), or an ambiguous
            goal.
    """

    def __init__(
        self,
        model_path: str,
        goal: str | None = None,
        dead_band: float = 0.02,
        scale: float = 1.0,
        done_bonus: float = 0.0,
        accumulate: str = "vlac",
        progress_weight: float = 1.0,
    ) -> None:
        if accumulate not in ACCUMULATE:
            raise ValueError(f"accumulate must be one of {ACCUMULATE}, got {accumulate!r}.")
        check_reward_weights(progress_weight, done_bonus)
        self.progress_weight = progress_weight
        self.critic, extra = load_progress_model(model_path)
        if self.critic.cfg.cameras:
            raise ValueError(
                f"The critic at {model_path} reads cameras {self.critic.cfg.cameras}; the actor's transitions carry "
                "vector groups only. Use a state critic (--state_group, no --camera) or a served critic."
            )
        self.goal = goal or default_goal(self.critic, extra)
        if self.goal not in self.critic.goal_table.goals:
            self.critic.add_goals([self.goal])
        self.dead_band, self.scale, self.done_bonus, self.accumulate = dead_band, scale, done_bonus, accumulate
        self.group = str(self.critic.cfg.state_group)
        self._values: dict[int, float] = {}

    def __call__(self, batch) -> np.ndarray:
        """Rewards ``[N]`` (float32) of the ``N`` transitions of one actor's batch, in order."""
        if self.group not in batch.obs:
            raise ValueError(f"Transitions lack the critic's group '{self.group}' (they hold {sorted(batch.obs)}).")
        n = len(batch)
        obs = TensorDict({self.group: torch.as_tensor(np.asarray(batch.obs[self.group]))}, [n])
        nxt = TensorDict({self.group: torch.as_tensor(np.asarray(batch.next_obs[self.group]))}, [n])
        score = self.critic.score(obs, nxt, self.goal)
        deltas = apply_dead_band(score.delta, self.dead_band)
        rewards = np.zeros(n, dtype=np.float32)
        for k in range(n):
            episode = int(batch.episode[k])
            before = self._values.get(episode, 0.0)
            after = float(value_step(torch.tensor(before), deltas[k], self.accumulate))
            progress = self.progress_weight * (after - before)
            rewards[k] = self.scale * (progress + self.done_bonus * float(score.done[k]))
            self._values[episode] = after
            if bool(batch.done[k]):
                self._values.pop(episode, None)
        return rewards


def from_env() -> LoopProgressReward:
    """The plug-in configured by ``RSLKIT_REWARD_MODEL``, ``_GOAL``, ``_DEAD_BAND``, ``_SCALE``, ``_DONE_BONUS``,
    ``_ACCUMULATE``, ``_PROGRESS_WEIGHT``.

    Raises:
        ValueError: ``RSLKIT_REWARD_MODEL`` is not set.
    """
    path = os.environ.get("RSLKIT_REWARD_MODEL")
    if not path:
        raise ValueError(
            "Set RSLKIT_REWARD_MODEL to a critic (model.safetensors from `python -m rslkit.rewards train`)."
        )
    dead_band = float(os.environ.get("RSLKIT_REWARD_DEAD_BAND", "0.02"))
    scale = float(os.environ.get("RSLKIT_REWARD_SCALE", "1"))
    bonus = float(os.environ.get("RSLKIT_REWARD_DONE_BONUS", "0"))
    accumulate = os.environ.get("RSLKIT_REWARD_ACCUMULATE", "vlac")
    weight = float(os.environ.get("RSLKIT_REWARD_PROGRESS_WEIGHT", "1"))
    goal = os.environ.get("RSLKIT_REWARD_GOAL") or None
    return LoopProgressReward(path, goal, dead_band, scale, bonus, accumulate, weight)
