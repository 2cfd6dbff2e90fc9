"""The contract every progress critic meets: ``score(obs_a, obs_b, goal) -> (progress delta, done probability)``.

VLAC (arXiv 2509.15937) reads two observations of one episode and the language goal and says how much closer the
second is to the goal than the first, signed, and whether the goal is reached in the second. rslkit's local model
(:mod:`rslkit.rewards.progress_model`) and the served-model adapter (:mod:`rslkit.rewards.served`) both implement
it; :mod:`rslkit.rewards.value` turns deltas into rewards, :mod:`rslkit.rewards.metrics` grades them.

Observations are TensorDicts with batch ``[B]`` holding the env's observation groups: vector groups (e.g.
``policy``: ``[B, D]`` float) and camera groups (``camera_<name>``: ``[B, H, W, 3]`` uint8, see
:mod:`rslkit.envs.camera_groups`). A critic names the groups it reads and refuses observations that lack them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from tensordict import TensorDict


@dataclass
class ProgressScore:
    """What a critic says about ``B`` pairs of observations."""

    delta: torch.Tensor
    """``[B]`` in ``[-1, 1]``: the fraction of the whole task done between ``obs_a`` and ``obs_b`` (negative when
    ``obs_b`` is further from the goal)."""
    done: torch.Tensor
    """``[B]`` in ``[0, 1]``: probability that the goal is reached in ``obs_b``."""


@runtime_checkable
class ProgressCritic(Protocol):
    """A VLAC-style pairwise progress critic."""

    def score(
        self,
        obs_a: TensorDict,
        obs_b: TensorDict,
        goal: str | Sequence[str],
        reference: TensorDict | None = None,
    ) -> ProgressScore:
        """Signed progress from ``obs_a`` to ``obs_b`` and the done probability of ``obs_b``.

        Args:
            obs_a, obs_b: observations ``[B]`` (same groups and shapes).
            goal: the language goal, one for the batch or one per pair (``B`` strings).
            reference: optional frames ``[R]`` of a demonstration of the same goal, in time order (VLAC's one-shot
                in-context mode); a critic that cannot use them raises ``ValueError``.

        Returns:
            ``ProgressScore`` with ``delta [B]`` and ``done [B]``.

        Raises:
            ValueError: observations that lack a group the critic reads, wrong image sizes, batch sizes that differ,
                or a goal list of the wrong length.
        """
        ...


def goals_for_batch(goal: str | Sequence[str], batch: int) -> list[str]:
    """``goal`` as a list of ``batch`` strings.

    Raises:
        ValueError: a list whose length is not ``batch``, or an empty goal.
    """
    goals = [goal] * batch if isinstance(goal, str) else list(goal)
    if len(goals) != batch:
        raise ValueError(f"Got {len(goals)} goals for {batch} observation pairs; pass one goal or one per pair.")
    if any(not isinstance(g, str) or not g.strip() for g in goals):
        raise ValueError("Every goal must be a non-empty string (the task instruction, e.g. 'lift the red cube').")
    return goals


def check_pair(obs_a: TensorDict, obs_b: TensorDict) -> int:
    """Batch size of a pair of observations.

    Raises:
        ValueError: batch sizes, groups or shapes that differ between ``obs_a`` and ``obs_b``.
    """
    if obs_a.batch_size != obs_b.batch_size or len(obs_a.batch_size) != 1:
        raise ValueError(
            f"obs_a and obs_b need one equal batch dimension, got {obs_a.batch_size} and {obs_b.batch_size}."
        )
    keys_a, keys_b = set(obs_a.keys()), set(obs_b.keys())
    if keys_a != keys_b:
        raise ValueError(f"obs_a and obs_b hold different groups: {sorted(keys_a)} vs {sorted(keys_b)}.")
    for key in keys_a:
        if obs_a[key].shape != obs_b[key].shape:
            raise ValueError(
                f"Group '{key}' has shape {tuple(obs_a[key].shape)} in obs_a, {tuple(obs_b[key].shape)} in obs_b."
            )
    return int(obs_a.batch_size[0])
