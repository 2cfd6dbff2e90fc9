"""LeRobot's MEAN_STD normalization of SmolVLA's state and actions, with the zero padding to the model's max dims.

``y = (x - mean) / (std + eps)`` (eps = 1e-8, LeRobot's), padded with zeros to ``padded_dim``; the inverse crops
and applies ``x = y * std + mean``. The statistics are buffers: saved with the policy, written to and read from
LeRobot's normalizer processor files (``observation.state.mean``, ``action.std``, ...).
"""

from __future__ import annotations

import torch
from torch import nn

from rslkit.models.smolvla.inputs import pad_vector

EPS = 1e-8


class MeanStdNormalizer(nn.Module):
    """``[..., dim]`` raw -> ``[..., padded_dim]`` normalized and zero-padded, and back.

    Args:
        dim: the raw size (the robot's state or action size).
        padded_dim: the model's size (``max_state_dim`` / ``max_action_dim``).
    """

    def __init__(self, dim: int, padded_dim: int) -> None:
        super().__init__()
        if padded_dim < dim:
            raise ValueError(
                f"Cannot pad {dim} values to {padded_dim}: the model's max dim is smaller than the data's."
            )
        self.dim, self.padded_dim = dim, padded_dim
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.mean: torch.Tensor
        self.std: torch.Tensor

    def set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Take the dataset's ``mean`` and ``std`` ``[dim]``.

        Raises:
            ValueError: wrong sizes, or a negative or non-finite statistic.
        """
        mean, std = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != (self.dim,) or std.shape != (self.dim,):
            raise ValueError(f"mean and std must be [{self.dim}], got {list(mean.shape)} and {list(std.shape)}.")
        if not (torch.isfinite(mean).all() and torch.isfinite(std).all() and (std >= 0).all()):
            raise ValueError(f"mean and std must be finite and std >= 0, got {mean.tolist()} and {std.tolist()}.")
        self.mean.copy_(mean)
        self.std.copy_(std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Raw ``[..., dim]`` -> normalized, padded ``[..., padded_dim]``."""
        return pad_vector((x - self.mean) / (self.std + EPS), self.padded_dim)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Same as calling the module."""
        return self(x)

    def unnormalize(self, y: torch.Tensor) -> torch.Tensor:
        """Normalized ``[..., padded_dim]`` (or ``[..., dim]``) -> raw ``[..., dim]``."""
        return y[..., : self.dim] * self.std + self.mean
