"""Scripted experts: the interface a task's expert has (``TaskSpec.expert``), and the adapters around it.

An expert maps observation groups ``{"policy": [..., D]}`` (numpy, with or without a batch dimension) to actions
``[..., A]`` in ``[-1, 1]``. Each is stateless, so it can take over in any state (a corridor trigger mid-episode):
what it must remember it reads back from the observation (the SO-101 tasks observe their last action). Experts read
their columns by name (:class:`~rslkit.envs.columns.Columns` over the task's ``observation_names``), never by raw
index. The real-world loop's scripted human, :func:`rslkit.realworld.experts.scripted_human_for`, and
``python -m rslkit.record --expert`` both run them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

Observation = Mapping[str, np.ndarray]
"""One env's observation groups (or a batch of them): ``{"policy": [D]}`` or ``{"policy": [N, D]}``."""
Expert = Callable[[Observation], np.ndarray]
"""Observation groups -> actions ``[..., A]`` in ``[-1, 1]``."""
GoalDistance = Callable[[Observation], float]
"""One env's observation groups -> distance to the goal, 0 where the task counts as solved."""


def batched(fn: Callable[[np.ndarray], np.ndarray], group: str = "policy") -> Expert:
    """An expert from a one-env function ``[D] -> [A]`` of group ``group``, for observations ``[D]`` or
    ``[..., D]`` (float64 inside, float32 actions out)."""

    def expert(obs: Observation) -> np.ndarray:
        x = np.asarray(obs[group], dtype=np.float64)
        if x.ndim == 1:
            return fn(x).astype(np.float32)
        rows = [fn(row) for row in x.reshape(-1, x.shape[-1])]
        return np.stack(rows).reshape(*x.shape[:-1], -1).astype(np.float32)

    return expert


def as_expert_observation(obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A VecEnv's observation TensorDict (or mapping of tensors) as the numpy groups experts take."""
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in obs.items()}


def expert_policy(expert: Expert, device: str | torch.device) -> Callable[[TensorDict], torch.Tensor]:
    """``obs -> actions [N, A]`` (float32 on ``device``) of a numpy expert, for code that runs torch policies
    (:func:`rslkit.data.recorder.record_episodes`)."""

    def act(obs: TensorDict) -> torch.Tensor:
        actions = np.asarray(expert(as_expert_observation(obs)), dtype=np.float32)
        return torch.as_tensor(actions, device=device)

    return act
