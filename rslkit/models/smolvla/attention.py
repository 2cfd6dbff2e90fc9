"""SmolVLA's attention arithmetic, as LeRobot computes it: rotary positions, prefix-LM masks, eager attention.

Written to give LeRobot's numbers (``lerobot/policies/smolvla``): RoPE with a fixed wavelength of 10,000 (not the
VLM config's ``rope_theta``), the two halves of each head rotated against each other, attention logits in float32
with masked entries set to the float32 minimum (a fully masked row attends uniformly, as LeRobot's does).
"""

from __future__ import annotations

import torch

ROPE_WAVELENGTH = 10_000.0


def apply_rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x [B, L, H, D]`` at integer ``positions [B, L]`` (float32 arithmetic)."""
    half = x.shape[-1] // 2
    dtype = x.dtype
    x = x.float()
    exponents = (2.0 / x.shape[-1]) * torch.arange(half, dtype=torch.float32, device=x.device)
    timescale = ROPE_WAVELENGTH**exponents
    radians = (positions[..., None].float() / timescale[None, None, :])[..., None, :]
    sin, cos = torch.sin(radians), torch.cos(radians)
    x1, x2 = x.split(half, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dtype)


def prefix_lm_mask(pad: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``[B, L, L]`` boolean mask (True: may attend) from ``pad [B, L]`` (True: a real token) and ``blocks [B, L]``
    (1 where a new attention block starts): token i sees token j when j's block starts at or before i's (big_vision's
    ``make_att_2d_masks``: all 0 is full attention, all 1 causal)."""
    cumsum = torch.cumsum(blocks, dim=1)
    allowed = cumsum[:, None, :] <= cumsum[:, :, None]
    return allowed & (pad[:, None, :] & pad[:, :, None])


def attention(
    mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, num_heads: int
) -> torch.Tensor:
    """Grouped-query attention of ``query [B, Lq, H, D]`` over ``key, value [B, Lk, Hkv, D]`` with ``mask
    [B, Lq, Lk]`` (True: attend) -> ``[B, Lq, H*D]``."""
    b, lk, kv_heads, d = key.shape
    groups = num_heads // kv_heads
    key = key[:, :, :, None, :].expand(b, lk, kv_heads, groups, d).reshape(b, lk, num_heads, d)
    value = value[:, :, :, None, :].expand(b, lk, kv_heads, groups, d).reshape(b, lk, num_heads, d)
    logits = torch.matmul(query.float().transpose(1, 2), key.float().transpose(1, 2).transpose(2, 3))
    logits = logits * d**-0.5
    logits = torch.where(mask[:, None, :, :], logits, torch.finfo(torch.float32).min)
    probs = torch.softmax(logits, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
    return out.reshape(b, -1, num_heads * d)
