"""Input checks that name the offending environments, and the size of the observation group a policy reads."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv


def _bad_envs(x: torch.Tensor) -> list[int]:
    finite = torch.isfinite(x.reshape(x.shape[0], -1)).all(-1)
    if bool(finite.all()):
        return []
    return (~finite).nonzero().squeeze(-1).tolist()


def check_finite(obs: TensorDict, rewards: torch.Tensor) -> None:
    """Raise if any observation group or reward is NaN/inf, naming the env indices.

    Raises:
        ValueError: with the group and the first env indices affected.
    """
    for group, value in obs.items(include_nested=True, leaves_only=True):
        assert isinstance(value, torch.Tensor)
        bad = _bad_envs(value)
        if bad:
            raise ValueError(
                f"Non-finite values in observation group '{group}' for env indices {bad[:20]}"
                f"{' ...' if len(bad) > 20 else ''}. The simulation of these envs likely diverged: check their "
                "actions, reset logic and physics time step (set agent.check_for_nan false to skip this check)."
            )
    bad = _bad_envs(rewards.unsqueeze(-1))
    if bad:
        raise ValueError(f"Non-finite rewards for env indices {bad[:20]}; check the reward terms of the task.")


def policy_obs_dim(env: VecEnv, group: str) -> int:
    """Size of observation group ``group`` of ``env``.

    Raises:
        ValueError: when the env has no such group or it is not ``[N, D]``.
    """
    obs = env.get_observations()
    if group not in obs.keys():
        raise ValueError(
            f"The env has no observation group '{group}' (it has {sorted(obs.keys())}); set agent.policy.obs_group."
        )
    if obs[group].dim() != 2:
        raise ValueError(f"Observation group '{group}' must be [num_envs, dim], got {list(obs[group].shape)}.")
    return int(obs[group].shape[-1])
