"""Multi-layer perceptrons."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.nn as nn

from rslkit.models.activations import ELU
from rslkit.utils.validation import expect

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
    "leaky_relu": nn.LeakyReLU,
}


def make_mlp(input_dim: int, hidden_dims: Sequence[int], output_dim: int, activation: str = "elu") -> nn.Sequential:
    """``Linear -> act -> ... -> Linear`` mapping ``[B, input_dim]`` to ``[B, output_dim]``.

    Raises:
        ValueError: for an unknown activation name.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unknown activation '{activation}'; choose one of {sorted(ACTIVATIONS)}.")
    layers: list[nn.Module] = []
    dims = [input_dim, *hidden_dims]
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(d_in, d_out), ACTIVATIONS[activation]()]
    layers.append(nn.Linear(dims[-1], output_dim))
    return nn.Sequential(*layers)


def check_actor_critic_mlps(cfg: Any) -> None:
    """Validate the ``actor_hidden_dims``, ``critic_hidden_dims`` and ``activation`` fields a network config shares
    (PPO's ``PolicyCfg``, SAC's ``SACNetworkCfg``); raises :class:`~rslkit.utils.validation.ConfigError`."""
    for name in ("actor_hidden_dims", "critic_hidden_dims"):
        dims = tuple(getattr(cfg, name))
        expect(all(isinstance(d, int) and d >= 1 for d in dims), name, f"must all be integers >= 1, got {dims}")
    act = cfg.activation
    expect(act in ACTIVATIONS, "activation", f"is unknown ({act!r}); use one of {', '.join(ACTIVATIONS)}")
