"""Velocity network ``v(x_t, t, obs[, d])`` over action chunks: sinusoidal time embedding and a residual MLP."""

from __future__ import annotations

import torch
import torch.nn as nn

from rslkit.models.flow.embedding import SinusoidalEmbedding


class ResidualBlock(nn.Module):
    """``h + W2 silu(W1 LayerNorm(h))`` (pre-norm residual MLP block)."""

    def __init__(self, dim: int, expansion: int = 2) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim), nn.Linear(dim, expansion * dim), nn.SiLU(), nn.Linear(expansion * dim, dim)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``h [B, dim]`` -> ``[B, dim]``."""
        return h + self.net(h)


class VelocityNet(nn.Module):
    """Predicts the flow velocity of a noisy action chunk.

    The flattened chunk ``x_t [B, Ta*A]``, the normalized observation ``[B, D]`` and the embeddings of ``t`` (and of
    the step size ``d`` for shortcut models) are concatenated, projected to ``hidden_dim``, passed through
    ``num_blocks`` residual blocks and projected back to ``[B, Ta, A]``.

    Args:
        obs_dim: observation size ``D``.
        horizon: chunk length ``Ta``.
        action_dim: action size ``A``.
        hidden_dim: width of the residual stream.
        num_blocks: number of residual blocks.
        time_embed_dim: size of each sinusoidal embedding.
        step_conditioned: also condition on the step size ``d`` (shortcut models, Frans et al. 2024).
    """

    def __init__(
        self,
        obs_dim: int,
        horizon: int,
        action_dim: int,
        hidden_dim: int = 256,
        num_blocks: int = 3,
        time_embed_dim: int = 32,
        step_conditioned: bool = False,
    ) -> None:
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        self.step_conditioned = step_conditioned
        self.time_embed = SinusoidalEmbedding(time_embed_dim)
        self.step_embed = SinusoidalEmbedding(time_embed_dim) if step_conditioned else None
        in_dim = horizon * action_dim + obs_dim + time_embed_dim * (2 if step_conditioned else 1)
        self.input = nn.Linear(in_dim, hidden_dim)
        self.blocks = nn.Sequential(*[ResidualBlock(hidden_dim) for _ in range(num_blocks)])
        self.output = nn.Sequential(nn.LayerNorm(hidden_dim), nn.SiLU(), nn.Linear(hidden_dim, horizon * action_dim))

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, d: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Velocity ``[B, Ta, A]`` at ``x [B, Ta, A]``, times ``t [B]``, observations ``obs [B, D]``, step sizes ``d
        [B]`` (required exactly when the net is step-conditioned)."""
        parts = [x.flatten(1), obs, self.time_embed(t)]
        if self.step_embed is not None:
            if d is None:
                raise ValueError("This velocity net is step-conditioned (shortcut model); pass the step size d.")
            parts.append(self.step_embed(d))
        h = self.blocks(self.input(torch.cat(parts, dim=-1)))
        return self.output(h).view(-1, self.horizon, self.action_dim)
