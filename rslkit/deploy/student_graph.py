"""The exportable graph of a distilled student: its observation groups (and memory state) in, actions out."""

from __future__ import annotations

import torch
import torch.nn as nn

from rslkit.models.obs_history import ObservationHistory
from rslkit.models.recurrent import Memory
from rslkit.models.student_teacher import StudentTeacher


class StudentGraph(nn.Module):
    """One step of a distilled student with explicit state (the teacher is left out).

    Without memory: ``(*groups [B, D_g]) -> actions [B, A]``. With a window of frames: ``(*groups, h [N-1, B, D])
    -> (actions, h_out)``; GRU: ``(*groups, h [L, B, H]) -> (actions, h_out)``; LSTM: ``(*groups, h, c) ->
    (actions, h_out, c_out)``. A new episode starts from zero state (the caller resets it, as for recurrent PPO
    policies).

    Args:
        policy: the trained student-teacher (the student's modules are shared, not copied).
    """

    def __init__(self, policy: StudentTeacher) -> None:
        super().__init__()
        self.groups = list(policy.obs_groups)
        self.normalizer = policy.normalizer
        self.memory = policy.memory
        self.student = policy.student
        self._encode = policy.encode  # the student's own step (uses the modules registered above)

    def state_names(self) -> list[str]:
        """Names of the state inputs (outputs: ``<name>_out``): none, ``h``, or ``h, c`` for an LSTM."""
        if self.memory is None:
            return []
        return ["h", "c"] if isinstance(self.memory, Memory) and self.memory.is_lstm else ["h"]

    def state_shape(self) -> list[int]:
        """Shape of each state tensor with the batch as ``-1``."""
        if isinstance(self.memory, ObservationHistory):
            return [self.memory.length - 1, -1, self.memory.dim]
        assert isinstance(self.memory, Memory)
        return [self.memory.num_layers, -1, self.memory.hidden_dim]

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """``inputs``: the student's groups ``[B, D_g]`` in :attr:`groups` order, then the state tensors."""
        n = len(self.groups)
        x = inputs[0] if n == 1 else torch.cat(inputs[:n], dim=-1)
        state = inputs[n:]
        hidden = None if not state else state[0] if len(state) == 1 else (state[0], state[1])
        features, hidden = self._encode(x, hidden)
        actions = self.student(features)
        if hidden is None:
            return actions
        return (actions, *hidden) if isinstance(hidden, tuple) else (actions, hidden)
