"""ReinFlow's exploration noise network: a bounded, learnable standard deviation per Euler step."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn as nn

from rslkit.models.flow.embedding import SinusoidalEmbedding
from rslkit.models.mlp import make_mlp


class BoundedNoiseNet(nn.Module):
    """``sigma_k = sigma_theta'(a_k, t_k, o)`` with ``log sigma^2`` squashed into
    ``[log sigma_min^2, log sigma_max^2]``:

    ``log sigma^2 = lo + (hi - lo) (tanh(h) + 1) / 2``,  ``lo = log sigma_min^2``, ``hi = log sigma_max^2``,

    so the noise can neither vanish (no exploration, infinite log-densities) nor explode. The last layer starts at
    zero: every step's ``sigma`` starts at the geometric mean ``sqrt(sigma_min sigma_max)``.

    Args:
        obs_dim: observation size ``D``.
        horizon: chunk length ``Ta``.
        action_dim: action size ``A``.
        sigma_min, sigma_max: bounds of the standard deviation (normalized action units).
        hidden_dims: MLP widths.
        time_embed_dim: size of the time embedding.
    """

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        action_dim: int,
        sigma_min: float,
        sigma_max: float,
        hidden_dims: Sequence[int] = (64, 64),
        time_embed_dim: int = 16,
    ) -> None:
        super().__init__()
        if not 0 < sigma_min <= sigma_max:
            raise ValueError(f"Need 0 < sigma_min <= sigma_max, got {sigma_min}, {sigma_max}.")
        self.log_var_min, self.log_var_max = 2 * math.log(sigma_min), 2 * math.log(sigma_max)
        self.horizon, self.action_dim = horizon, action_dim
        self.time_embed = SinusoidalEmbedding(time_embed_dim)
        in_dim = horizon * action_dim + obs_dim + time_embed_dim
        self.mlp = make_mlp(in_dim, hidden_dims, horizon * action_dim, activation="tanh")
        last = self.mlp[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def log_var(self, x: torch.Tensor, t: torch.Tensor, obs_n: torch.Tensor) -> torch.Tensor:
        """Bounded ``log sigma^2 [B, Ta, A]`` at ``x [B, Ta, A]``, ``t [B]``, ``obs_n [B, D]``."""
        h = self.mlp(torch.cat((x.flatten(1), obs_n, self.time_embed(t)), dim=-1))
        squashed = (torch.tanh(h) + 1) / 2
        return (self.log_var_min + (self.log_var_max - self.log_var_min) * squashed).view_as(x)

    def forward(self, x: torch.Tensor, t: torch.Tensor, obs_n: torch.Tensor) -> torch.Tensor:
        """Standard deviation ``sigma [B, Ta, A]``."""
        return torch.exp(0.5 * self.log_var(x, t, obs_n))
