"""The loss terms of PPO (Schulman et al. 2017, arXiv 1707.06347), shared by PPO and ReinFlow.

Each term is written as a loss to minimize, named as in the paper; ``ratio`` is ``r_t(theta) = pi_theta(a_t | s_t) /
pi_theta_old(a_t | s_t)`` of the samples ``[B]`` (ReinFlow: of the whole noisy chain, normalized per dimension).
"""

from __future__ import annotations

import torch


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """``-L^CLIP`` (eq. 7): ``-E[min(r A, clip(r, 1 - eps, 1 + eps) A)]`` with ``eps = clip``.

    Args:
        ratio, advantages: ``[B]``.
        clip: ``eps``.

    Returns:
        The scalar loss.
    """
    return -torch.min(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages).mean()


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
) -> torch.Tensor:
    """``L^VF = E[(V(s) - R)^2]``; with ``clip``, the pessimistic clipped form of OpenAI baselines' PPO2 and rsl_rl
    (not in the paper): ``E[max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)]``.

    Args:
        values: ``V(s) [B]`` of the critic being trained; returns: targets ``R [B]``.
        old_values: the rollout's ``V_old(s) [B]`` (needed with ``clip``).
        clip: ``eps`` of the value clipping; None: unclipped.

    Returns:
        The scalar loss.
    """
    if clip is None:
        return ((values - returns) ** 2).mean()
    if old_values is None:
        raise ValueError("The clipped value loss needs the rollout's values (old_values).")
    values_clipped = old_values + (values - old_values).clamp(-clip, clip)
    return torch.max((values - returns) ** 2, (values_clipped - returns) ** 2).mean()


def clip_fraction(ratio: torch.Tensor, clip: float) -> torch.Tensor:
    """Fraction of the samples whose ratio lies outside ``[1 - clip, 1 + clip]`` (a logged statistic)."""
    return ((ratio - 1).abs() > clip).float().mean()
