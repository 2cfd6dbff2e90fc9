"""Agent config of policy distillation (``--algo distillation``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.distillation import DistillationCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.student_teacher import StudentCfg
from rslkit.runners.run_config import EnvRunCfg


@dataclass
class DistillationRunnerCfg(EnvRunCfg):
    """A student distilled from a PPO teacher on the student's own rollouts. CLI: ``--agent.<field>``
    (``--agent.teacher_checkpoint PATH``, or ``train.py --checkpoint PATH`` with the teacher's checkpoint)."""

    teacher_checkpoint: str = ""
    """The teacher: a PPO checkpoint (``model_<iter>.pt``) trained on this task; its policy settings replace
    ``teacher``. Distillation checkpoints hold the teacher, so resuming, playing and exporting need no file."""
    teacher: PolicyCfg = field(default_factory=PolicyCfg)
    """Filled from the teacher's checkpoint (kept so a distillation checkpoint rebuilds without it)."""
    student: StudentCfg = field(default_factory=StudentCfg)
    algorithm: DistillationCfg = field(default_factory=DistillationCfg)
