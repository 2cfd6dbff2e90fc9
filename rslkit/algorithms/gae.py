"""Generalized advantage estimation (Schulman et al. 2016)."""

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
