"""Auxiliary state prediction for behaviour cloning from images: a probe that reads the observation tokens and
predicts privileged simulator state (the cube's position and orientation, contacts, the goal).

From 200 demonstrations a CNN trained by the flow loss alone sees 200 cube placements; the flow loss says only
indirectly where the cube is. Regressing the recorded simulator state from the same tokens (the dataset's
``observation.environment_state``) gives the image encoder a dense, direct target at every frame — the auxiliary
tasks of UNREAL (Jaderberg et al. 2017) and of asymmetric sim-to-real policies (Pinto et al. 2018). The probe is a
training aid only: the deployed policy, its export and its inputs do not change.
"""

from __future__ import annotations

import torch
from torch import nn

from rslkit.data.normalizer import MinMaxNormalizer


class StateProbe(nn.Module):
    """``tokens [B, L, d] -> state [B, E]``: an MLP over the flattened observation tokens; the state is min-max
    normalized to ``[-1, 1]`` with the dataset's statistics (buffers, saved with the weights).

    Args:
        num_tokens: ``L``, the observation tokens of the policy.
        d_model: ``d``, their width.
        state_dim: ``E``, the size of the predicted state.
        hidden: width of the MLP's hidden layer.
    """

    def __init__(self, num_tokens: int, d_model: int, state_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.state_dim = state_dim
        self.normalizer = MinMaxNormalizer(state_dim)
        self.net = nn.Sequential(nn.Linear(num_tokens * d_model, hidden), nn.GELU(), nn.Linear(hidden, state_dim))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Predicted normalized state ``[B, E]`` from ``tokens [B, L, d]``."""
        return self.net(tokens.flatten(1))

    def loss(self, tokens: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``mean |probe(tokens) - normalize(state)|^2`` over the batch and the ``E`` dimensions (raw ``state``)."""
        if state.shape != (tokens.shape[0], self.state_dim):
            raise ValueError(
                f"The probed state must be [B, {self.state_dim}] (the recorded observation.environment_state), got "
                f"{list(state.shape)}."
            )
        return (self(tokens) - self.normalizer(state)).pow(2).mean()
