"""Sinusoidal embedding of a continuous scalar (flow time ``t`` or step size ``d``)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class SinusoidalEmbedding(nn.Module):
    """``[B]`` scalars in ``[0, 1]`` -> ``[B, dim]`` features ``(sin(w_i s t), cos(w_i s t))`` (Vaswani et al.).

    Args:
        dim: embedding size (even).
        scale: multiplies the input first, so that ``[0, 1]`` spans many periods of the fast frequencies.
        max_period: slowest period, in units of ``scale * t``.
    """

    def __init__(self, dim: int, scale: float = 100.0, max_period: float = 10_000.0) -> None:
        super().__init__()
        if dim < 2 or dim % 2:
            raise ValueError(f"The sinusoidal embedding size must be even and >= 2, got {dim}.")
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("freqs", freqs * scale, persistent=False)
        self.freqs: torch.Tensor
        self.dim = dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """``t [B]`` -> ``[B, dim]``."""
        angles = t.reshape(-1, 1).float() * self.freqs
        return torch.cat((angles.sin(), angles.cos()), dim=-1)
