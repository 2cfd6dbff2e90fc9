"""Empirical observation normalization with exact, distributed-aware running statistics."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn


class EmpiricalNormalization(nn.Module):
    """Normalize ``x`` to zero mean and unit variance with statistics of all data seen so far.

    The statistics change only in :meth:`update` (called by PPO after optimization, so the first PPO ratio of an
    iteration is exactly 1). Under ``torch.distributed`` the update combines the batches of all ranks exactly, so
    every rank keeps identical statistics.
    """

    def __init__(self, dim: int, eps: float = 1e-8, clip: float | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.mean: torch.Tensor
        self.var: torch.Tensor
        self.count: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: [..., dim]`` -> normalized ``x``."""
        y = (x - self.mean) * torch.rsqrt(self.var + self.eps)
        return y.clamp(-self.clip, self.clip) if self.clip is not None else y

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold the samples ``x: [B, dim]`` (of every rank, when distributed) into the running statistics."""
        x = x.reshape(-1, self.mean.shape[0]).double()
        n = torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)
        total = x.sum(0)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(n)
            dist.all_reduce(total)
        batch_mean = total / n
        sq = ((x - batch_mean) ** 2).sum(0)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sq)
        batch_var = sq / n
        # Chan et al. parallel combination of (count, mean, var).
        count = self.count + n
        delta = batch_mean - self.mean.double()
        mean = self.mean.double() + delta * n / count
        m2 = self.var.double() * self.count + batch_var * n + delta**2 * self.count * n / count
        self.mean.copy_(mean.float())
        self.var.copy_((m2 / count).float())
        self.count.copy_(count)
