"""The flow-matching action expert: a transformer over the noisy action tokens of a chunk that attends to the
observation tokens (SmolVLA's interleaved self- and cross-attention, pi0's flow-matching action expert)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rslkit.models.flow.embedding import SinusoidalEmbedding


class Attention(nn.Module):
    """Multi-head attention of queries ``x [B, T, d]`` over ``context [B, L, d]`` (scaled dot product; written out
    rather than ``nn.MultiheadAttention``, whose fused inference kernel has no ONNX export)."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, context: torch.Tensor, blocked: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, T, d]`` attends to ``context [B, L, d]``; ``blocked [T, L]`` (True: query ``i`` may not see key
        ``j``) -> ``[B, T, d]``."""
        b, t, d = x.shape
        h = self.num_heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(context).view(b, context.shape[1], 2, h, d // h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None if blocked is None else ~blocked)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class ExpertBlock(nn.Module):
    """Pre-norm block: ``h += SelfAttn(h)``, ``h += CrossAttn(h, obs)``, ``h += MLP(h)``."""

    def __init__(self, d_model: int, num_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm_self = nn.LayerNorm(d_model)
        self.self_attn = Attention(d_model, num_heads)
        self.norm_cross = nn.LayerNorm(d_model)
        self.cross_attn = Attention(d_model, num_heads)
        self.norm_mlp = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model), nn.GELU(), nn.Linear(mlp_ratio * d_model, d_model)
        )

    def forward(self, h: torch.Tensor, obs: torch.Tensor, self_mask: torch.Tensor | None) -> torch.Tensor:
        """``h [B, Ta, d]`` action tokens, ``obs [B, L, d]`` observation tokens, ``self_mask [Ta, Ta]`` (True: may
        not attend) -> ``[B, Ta, d]``."""
        x = self.norm_self(h)
        h = h + self.self_attn(x, x, self_mask)
        h = h + self.cross_attn(self.norm_cross(h), obs)
        return h + self.mlp(self.norm_mlp(h))


class ActionExpert(nn.Module):
    """``v(x_t [B, Ta, A], t [B], obs tokens [B, L, d][, d [B]]) -> [B, Ta, A]``, the velocity of the chunk.

    Each noisy action ``x_t[:, i]`` becomes a token ``W x + p_i + T(t) (+ D(d))`` (position ``p_i``, embeddings of
    the flow time and, for shortcut models, of the step size), passes ``num_layers`` :class:`ExpertBlock` and is
    projected back to ``A`` numbers.
    """

    def __init__(
        self,
        action_dim: int,
        horizon: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        mlp_ratio: int = 4,
        time_embed_dim: int = 64,
        causal: bool = False,
        step_conditioned: bool = False,
    ) -> None:
        super().__init__()
        self.horizon, self.action_dim, self.step_conditioned = horizon, action_dim, step_conditioned
        self.action_in = nn.Linear(action_dim, d_model)
        self.position = nn.Parameter(torch.randn(horizon, d_model) * 0.02)
        self.time = nn.Sequential(SinusoidalEmbedding(time_embed_dim), nn.Linear(time_embed_dim, d_model), nn.SiLU())
        self.step = (
            nn.Sequential(SinusoidalEmbedding(time_embed_dim), nn.Linear(time_embed_dim, d_model), nn.SiLU())
            if step_conditioned
            else None
        )
        self.blocks = nn.ModuleList([ExpertBlock(d_model, num_heads, mlp_ratio) for _ in range(num_layers)])
        self.out = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, action_dim))
        mask = torch.triu(torch.ones(horizon, horizon, dtype=torch.bool), diagonal=1) if causal else None
        self.register_buffer("self_mask", mask, persistent=False)
        self.self_mask: torch.Tensor | None

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, d: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Velocity ``[B, Ta, A]`` (see the class doc); ``d`` is required exactly for step-conditioned experts."""
        h = self.action_in(x) + self.position + self.time(t).unsqueeze(1)
        if self.step is not None:
            if d is None:
                raise ValueError("This action expert is step-conditioned (shortcut model); pass the step size d.")
            h = h + self.step(d).unsqueeze(1)
        for block in self.blocks:
            h = block(h, obs, self.self_mask)
        return self.out(h)
