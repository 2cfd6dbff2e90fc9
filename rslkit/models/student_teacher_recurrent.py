"""A recurrent student (GRU or LSTM) distilled from a teacher: rsl_rl's ``StudentTeacherRecurrent``."""

from __future__ import annotations

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.actor_critic import ActorCritic
from rslkit.models.recurrent import Hidden, Memory
from rslkit.models.student_teacher import StudentCfg, StudentTeacher


class StudentTeacherRecurrent(StudentTeacher):
    """:class:`~rslkit.models.student_teacher.StudentTeacher` whose student reads its normalized observation through
    a GRU or LSTM (``cfg.rnn_type``) before the MLP; the memory state is explicit, as in
    :class:`~rslkit.models.recurrent.Memory`, and truncated backpropagation through time runs over
    ``gradient_length`` steps in the update."""

    def _make_memory(self, dim: int) -> nn.Module | None:
        c = self.cfg
        return Memory(dim, c.rnn_type, c.rnn_hidden_dim, c.rnn_num_layers)

    def _trunk_dim(self, dim: int) -> int:
        return self.cfg.rnn_hidden_dim

    def encode(self, x: torch.Tensor, hidden: Hidden | None) -> tuple[torch.Tensor, Hidden | None]:
        assert isinstance(self.memory, Memory) and hidden is not None
        return self.memory.step(self.normalizer(x), hidden)


def make_student_teacher(obs: TensorDict, num_actions: int, cfg: StudentCfg, teacher: ActorCritic) -> StudentTeacher:
    """The student-teacher of ``cfg``: recurrent when ``cfg.rnn_type`` names a memory."""
    cls = StudentTeacherRecurrent if cfg.rnn_type != "none" else StudentTeacher
    return cls(obs, num_actions, cfg, teacher)
