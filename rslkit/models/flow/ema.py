"""Exponential moving average of a model's weights (evaluation and deployment use the averaged copy)."""

from __future__ import annotations

import copy
from typing import Generic, TypeVar

import torch
import torch.nn as nn

ModelT = TypeVar("ModelT", bound=nn.Module)


class EMA(Generic[ModelT]):
    """A frozen copy of ``model`` tracking ``w_ema <- decay_n w_ema + (1 - decay_n) w`` after every update.

    ``decay_n = min(decay, (1 + n) / (10 + n))`` warms up over the first updates (so early copies are not stuck at
    the initialization); buffers (normalizer statistics) are copied as they are. Parameters that do not require
    gradients in ``model`` (frozen) are left as copied: they never change.

    Args:
        model: the model being trained.
        decay: the long-run decay (e.g. 0.995).
    """

    def __init__(self, model: ModelT, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"The EMA decay must be in [0, 1), got {decay}.")
        self.model: ModelT = copy.deepcopy(model).eval().requires_grad_(False)
        self.decay = decay
        self.num_updates = 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards the current weights of ``model``."""
        self.num_updates += 1
        decay = min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))
        pairs = [(a, p) for a, p in zip(self.model.parameters(), model.parameters()) if p.requires_grad]
        if pairs:  # frozen weights (a pretrained backbone) equal their copies: skip them, they may be most of the model
            torch._foreach_lerp_([a for a, _ in pairs], [p.detach() for _, p in pairs], 1.0 - decay)
        for avg_buf, new_buf in zip(self.model.buffers(), model.buffers()):
            avg_buf.copy_(new_buf)

    def state_dict(self) -> dict:
        """Averaged weights and the update count."""
        return {"model": self.model.state_dict(), "num_updates": self.num_updates}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.model.load_state_dict(state["model"])
        self.num_updates = state["num_updates"]
