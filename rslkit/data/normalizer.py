"""Min-max normalization of observations and actions to ``[-1, 1]`` (the convention of diffusion / flow policies)."""

from __future__ import annotations

import torch
import torch.nn as nn


class MinMaxNormalizer(nn.Module):
    """Affine map of each dimension from ``[min, max]`` to ``[-1, 1]`` and back.

    Dimensions whose range is below ``eps`` (constant in the data) are only centred: they map to 0 and back
    exactly, instead of dividing by a near-zero range. Statistics are buffers, so they travel with checkpoints and
    an exported policy.

    Args:
        dim: feature size ``D``.
        eps: smallest range treated as informative.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("center", torch.zeros(dim))
        self.register_buffer("half_range", torch.ones(dim))
        self.center: torch.Tensor
        self.half_range: torch.Tensor

    @torch.no_grad()
    def set_stats(self, low: torch.Tensor, high: torch.Tensor) -> None:
        """Use ``low``/``high`` ``[D]`` (e.g. ``meta/stats.json`` ``min``/``max``) as the range.

        Raises:
            ValueError: for a wrong size, non-finite values or ``low > high``.
        """
        low = torch.as_tensor(low, dtype=torch.float32).reshape(-1)
        high = torch.as_tensor(high, dtype=torch.float32).reshape(-1)
        if low.shape != self.center.shape or high.shape != self.center.shape:
            raise ValueError(
                f"Normalization statistics have {low.numel()}/{high.numel()} dims, the model expects "
                f"{self.center.numel()}; recompute meta/stats.json for this dataset."
            )
        if not (torch.isfinite(low).all() and torch.isfinite(high).all()) or bool((low > high).any()):
            raise ValueError("Normalization min/max must be finite with min <= max; recompute meta/stats.json.")
        half = (high - low) / 2
        self.center.copy_((high + low) / 2)
        self.half_range.copy_(torch.where(half < self.eps, torch.ones_like(half), half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize ``x [..., D]`` (values inside the data range land in ``[-1, 1]``)."""
        return (x - self.center) / self.half_range

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Same as calling the module."""
        return self(x)

    def unnormalize(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`, ``y [..., D]``."""
        return y * self.half_range + self.center
