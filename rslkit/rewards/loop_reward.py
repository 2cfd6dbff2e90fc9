"""The local progress critic as the real-world actor's reward plug-in (``--actor.reward learned``).

Its settings are the typed fields of :class:`LoopRewardCfg`, set as ``--actor.learned_reward.<field>``:
``model`` (a ``model.safetensors`` written by ``python -m rslkit.rewards train``, required), ``goal`` (default: the
goal it was trained on), ``dead_band``, ``scale`` (1: an episode's return is at most 1; SAC's entropy temperature
is tuned against the reward's scale), ``done_bonus``, ``progress_weight`` (0 with a done bonus: the
success-classifier reward) and ``accumulate`` (``vlac`` or ``sum``; all: see :class:`~rslkit.rewards.value.ValueCfg`).
It runs in the actor's spool-writer thread, once per spooled batch, off the control loop, and needs torch on the
actor's machine; a robot computer without torch serves a critic instead (docs/rewards.md, "Served critics").

Each transition ``(obs, next_obs)`` is scored by the critic; VLAC's recursion (or the sum) keeps one value per
episode, and the reward is its increment. The episode itself ends as the env decides: the done probability is not
applied here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.rewards.progress_model import default_goal, load_progress_model
from rslkit.rewards.value import ACCUMULATE, apply_dead_band, check_reward_weights, value_step


@dataclass
class LoopRewardCfg:
    """Settings of the learned reward (``--actor.learned_reward.<field>``; see :class:`LoopProgressReward`)."""

    model: str = ""
    """The progress critic (``model.safetensors`` from ``python -m rslkit.rewards train``); required."""
    goal: str = ""
    """Language goal (empty: the one goal the critic was trained on)."""
    dead_band: float = 0.02
    scale: float = 1.0
    done_bonus: float = 0.0
    progress_weight: float = 1.0
    accumulate: str = "vlac"


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

    @classmethod
    def from_cfg(cls, cfg: LoopRewardCfg) -> LoopProgressReward:
        """The reward ``cfg`` describes.

        Raises:
            ValueError: no ``model`` (naming ``--actor.learned_reward.model``), or bad settings.
        """
        if not cfg.model:
            raise ValueError(
                "--actor.reward learned needs --actor.learned_reward.model PATH (a model.safetensors from "
                "`python -m rslkit.rewards train`)."
            )
        return cls(
            cfg.model, cfg.goal or None, cfg.dead_band, cfg.scale, cfg.done_bonus, cfg.accumulate, cfg.progress_weight
        )

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
