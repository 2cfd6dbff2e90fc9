"""The flow time grid and the Euler ODE sampler.

One function, :func:`time_grid`, defines the times ``t_k = k / K`` of a ``K``-step chain; the deterministic sampler,
the noisy ReinFlow chain and its log-probability recomputation all use it, so a policy is evaluated on exactly the
grid its samples came from (ReinFlow issue #5: two grids made the first PPO ratio 0.889 instead of 1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def time_grid(num_steps: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``[K]`` start times ``t_k = k / K`` of the ``K`` Euler steps from noise (``t = 0``) to data (``t = 1``).

    Raises:
        ValueError: for ``K < 1``.
    """
    if num_steps < 1:
        raise ValueError(f"The number of flow integration steps K must be >= 1, got {num_steps}.")
    return torch.arange(num_steps, device=device, dtype=torch.float32) / num_steps


def euler_sample(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x0: torch.Tensor, num_steps: int
) -> torch.Tensor:
    """Integrate ``dx/dt = v(x, t)`` from ``x0`` at ``t = 0`` to ``t = 1`` with ``K`` Euler steps.

    ``x_{k+1} = x_k + v(x_k, t_k) / K``.

    Args:
        velocity: ``(x [B, ...], t [B]) -> v [B, ...]``.
        x0: ``[B, ...]`` initial noise.
        num_steps: ``K``.

    Returns:
        ``x_K`` with the shape of ``x0``.
    """
    x = x0
    for t in time_grid(num_steps, x0.device):
        x = x + velocity(x, t.expand(x.shape[0])) / num_steps
    return x
