"""Recurrent memory (GRU/LSTM) with explicit hidden states and resets at episode boundaries."""

from __future__ import annotations

import torch
import torch.nn as nn

Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""GRU: ``h [L, B, H]``; LSTM: ``(h, c)``."""


def mask_hidden(hidden: Hidden, keep: torch.Tensor) -> Hidden:
    """Zero the hidden state of the batch entries where ``keep [B]`` is 0."""
    k = keep.view(1, -1, 1).to(torch.float32)
    if isinstance(hidden, tuple):
        return hidden[0] * k, hidden[1] * k
    return hidden * k


class Memory(nn.Module):
    """A GRU or LSTM run one step at a time in rollouts and over ``[T, B]`` sequences in updates.

    The sequence pass resets the hidden state exactly where the rollout did, so recomputed outputs equal the
    rollout's (the first PPO ratio of a recurrent policy is exactly 1).
    """

    def __init__(self, input_dim: int, rnn_type: str, hidden_dim: int, num_layers: int) -> None:
        super().__init__()
        if rnn_type not in ("gru", "lstm"):
            raise ValueError(f"rnn_type must be 'gru' or 'lstm', got '{rnn_type}'.")
        cls = nn.GRU if rnn_type == "gru" else nn.LSTM
        self.rnn = cls(input_dim, hidden_dim, num_layers)
        self.is_lstm = rnn_type == "lstm"
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers

    def init_hidden(self, batch: int, device: torch.device) -> Hidden:
        """Zero hidden state for ``batch`` sequences."""
        h = torch.zeros(self.num_layers, batch, self.hidden_dim, device=device)
        return (h, h.clone()) if self.is_lstm else h

    def step(self, x: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
        """One step: ``x [B, D]`` -> ``(out [B, H], hidden)``."""
        out, hidden = self.rnn(x.unsqueeze(0), hidden)
        return out.squeeze(0), hidden

    def sequence(self, x: torch.Tensor, hidden: Hidden, resets: torch.Tensor) -> torch.Tensor:
        """Run ``x [T, B, D]`` from ``hidden``, zeroing the state before step ``t`` where ``resets[t]`` is set.

        Returns:
            ``[T, B, H]`` outputs.
        """
        outs = []
        for t in range(x.shape[0]):
            hidden = mask_hidden(hidden, ~resets[t])
            out, hidden = self.step(x[t], hidden)
            outs.append(out)
        return torch.stack(outs)
