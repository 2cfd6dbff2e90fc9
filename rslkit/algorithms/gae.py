"""Generalized advantage estimation (Schulman et al. 2016), with the time-out bootstrap and advantage normalization
that PPO and ReinFlow apply around it."""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of a ``[T, N]`` rollout.

    ``delta_t = r_t + gamma * (1 - d_t) * V(s_{t+1}) - V(s_t)`` and
    ``A_t = delta_t + gamma * lam * (1 - d_t) * A_{t+1}``.
    Time-outs are bootstrapped before this call by adding ``gamma * V(s_t)`` to their reward (rsl_rl convention),
    so ``dones`` here cuts the trace for both terminations and time-outs.

    Args:
        rewards, values: ``[T, N]``; dones: ``[T, N]`` bool; last_values: ``V(s_T)`` ``[N]``.

    Returns:
        ``(advantages [T, N], returns [T, N])`` with ``returns = advantages + values``.
    """
    not_done = (~dones.bool()).to(values.dtype)
    advantages = torch.empty_like(values)
    next_adv = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * not_done[t] * next_values - values[t]
        next_adv = delta + gamma * lam * not_done[t] * next_adv
        advantages[t] = next_adv
        next_values = values[t]
    return advantages, advantages + values


def bootstrap_time_outs(
    rewards: torch.Tensor, values: torch.Tensor, time_outs: torch.Tensor | None, discount: float | torch.Tensor
) -> torch.Tensor:
    """``r + discount * V(s_t)`` where the episode was cut by a time limit, ``r`` elsewhere (rsl_rl convention).

    The rollout keeps no ``V(s_{t+1})`` of a time-out's final state, so ``V(s_t)`` stands in for it; GAE then treats
    the time-out as a termination.

    Args:
        rewards, values: ``[N]``; time_outs: ``[N]`` (bool or 0/1), None when the env reports none.
        discount: ``gamma`` (ReinFlow: ``gamma^n`` of the decision, a float or ``[N]``).
    """
    if time_outs is None:
        return rewards
    return rewards + discount * values * time_outs.to(rewards.device, torch.float32)


def normalize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + 1e-8)`` over all of ``advantages``."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
