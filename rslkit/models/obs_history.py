"""A window of the last observations, kept as explicit state like a recurrent memory's hidden state."""

from __future__ import annotations

import torch
import torch.nn as nn


class ObservationHistory(nn.Module):
    """The last ``length`` observations of each env, oldest first, for an MLP that reads a fixed window.

    The state is the ``length - 1`` frames before the current one, ``[length - 1, B, D]``: the layout of a
    recurrent memory's hidden state (:mod:`rslkit.models.recurrent`, batch in dim 1), so the same masking resets it
    at episode ends (to zeros, as an exported policy's state is reset) and it exports as a ``recurrent`` ONNX state.

    Args:
        dim: observation size ``D``.
        length: frames in the window (>= 2; one frame needs no history).
    """

    def __init__(self, dim: int, length: int) -> None:
        super().__init__()
        if length < 2:
            raise ValueError(f"An observation history holds >= 2 frames, got {length}.")
        self.dim = dim
        self.length = length

    def init_hidden(self, batch: int, device: torch.device) -> torch.Tensor:
        """Zero state (no earlier frames) for ``batch`` envs: ``[length - 1, batch, D]``."""
        return torch.zeros(self.length - 1, batch, self.dim, device=device)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``x [B, D]`` to the window.

        Returns:
            ``(frames [B, length, D] oldest first, the new state [length - 1, B, D])``.
        """
        frames = torch.cat((state, x.unsqueeze(0)), dim=0)
        return frames.transpose(0, 1), frames[1:]
