"""Learning-rate schedules of gradient-step loops: constant, or LeRobot's linear warm-up + cosine decay (the
``cosine_decay_with_warmup`` scheduler SmolVLA and pi0 fine-tune with).

The rate is a pure function of the gradient step, so a resumed run continues on the same curve (nothing to
checkpoint) and the same seed gives the same run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from rslkit.utils.validation import expect, finite

SMOLVLA_WARMUP_STEPS = 1_000
SMOLVLA_DECAY_STEPS = 30_000
SMOLVLA_DECAY_LR = 2.5e-6
"""LeRobot's SmolVLA scheduler defaults (``scheduler_warmup_steps``, ``scheduler_decay_steps``,
``scheduler_decay_lr``); its optimizer: AdamW, lr 1e-4, betas (0.9, 0.95), weight decay 1e-10, grad-norm clip 10."""


@dataclass
class LRScheduleCfg:
    """The learning rate over gradient steps. CLI: ``--agent.lr_schedule.<field>``.

    ``cosine_decay_with_warmup`` (LeRobot's): from ``peak / (W + 1)`` linearly up to the peak over ``W`` warm-up
    steps, then ``decay_lr + (peak - decay_lr) * (1 + cos(pi * min(s, D) / D)) / 2`` at step ``s`` (the cosine counts
    from step 0, as LeRobot's does). When the run has fewer gradient steps ``T`` than ``D``, ``W`` and ``D`` shrink by
    ``T / D`` (LeRobot's auto-scaling), so a short run still warms up and decays to ``decay_lr``.
    """

    name: Literal["constant", "cosine_decay_with_warmup"] = "constant"
    num_warmup_steps: int = SMOLVLA_WARMUP_STEPS
    num_decay_steps: int = SMOLVLA_DECAY_STEPS
    decay_lr: float = SMOLVLA_DECAY_LR
    """The rate at the end of the decay (and after it)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a schedule that cannot run."""
        names = ("constant", "cosine_decay_with_warmup")
        expect(self.name in names, "name", f"must be one of {', '.join(names)}, got {self.name!r}")
        warmup, decay = self.num_warmup_steps, self.num_decay_steps
        expect(isinstance(warmup, int) and warmup >= 0, "num_warmup_steps", f"must be an integer >= 0, got {warmup}")
        expect(isinstance(decay, int) and decay >= 1, "num_decay_steps", f"must be an integer >= 1, got {decay}")
        expect(finite(self.decay_lr) and self.decay_lr >= 0, "decay_lr", f"must be >= 0, got {self.decay_lr}")

    def factor(self, step: int, peak_lr: float, total_steps: int) -> float:
        """The rate at gradient step ``step`` (0-based) as a fraction of ``peak_lr``, for a run of ``total_steps``."""
        if self.name == "constant":
            return 1.0
        warmup, decay = self.num_warmup_steps, self.num_decay_steps
        if 0 < total_steps < decay:  # LeRobot's auto-scaling of a short run
            warmup, decay = int(warmup * total_steps / decay), total_steps
        if step < warmup:
            start = 1 / (warmup + 1)
            return start + (1 - start) * step / warmup
        cosine = 0.5 * (1 + math.cos(math.pi * min(step, decay) / decay))
        alpha = self.decay_lr / peak_lr
        return (1 - alpha) * cosine + alpha

    def apply(self, optimizer: torch.optim.Optimizer, step: int, peak_lr: float, total_steps: int) -> float:
        """Set every parameter group's rate for gradient step ``step``; returns it."""
        lr = peak_lr * self.factor(step, peak_lr, total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr
