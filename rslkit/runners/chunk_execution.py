"""How evaluation and ``play.py`` execute the chunks of a chunk policy: the config fields every flow and VLA runner
shares (:class:`ChunkExecutionCfg`) and their checks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.utils.validation import expect


def check_execute_steps(steps: int, horizon: int, field: str = "execute_steps") -> None:
    """Raise :class:`~rslkit.utils.validation.ConfigError` for ``field`` unless ``0 <= steps <= horizon``."""
    problem = f"must be an integer in [0, policy.horizon={horizon}] (the chunk size; 0: the whole chunk), got {steps}"
    expect(isinstance(steps, int) and 0 <= steps <= horizon, field, problem)


@dataclass
class ChunkExecutionCfg:
    """Chunk execution in evaluation and ``play.py`` (a base of the flow and VLA runner configs). CLI:
    ``--agent.<field>``."""

    execute_steps: int = 0
    """Actions executed per chunk before a fresh chunk is computed from the current observation (receding horizon,
    ``1 <= execute_steps <= policy.horizon``); 0: the whole chunk."""
    temporal_ensemble_coeff: float | None = None
    """ACT's temporal ensembling: a chunk every step, each step's action the mean of the last ``horizon`` chunks'
    predictions for it, the ``i``-th oldest weighted ``exp(-coeff * i)`` (ACT and LeRobot use 0.01); None: off.
    Excludes ``execute_steps``. See :class:`~rslkit.models.flow.chunk_executor.ChunkExecutor`."""

    def check_execution(self, horizon: int | None, prefix: str = "") -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for ``execute_steps`` outside ``[0, horizon]`` (or
        negative, where the horizon is not known yet), a non-finite ``temporal_ensemble_coeff``, or both set.
        ``prefix`` goes before the field names in the message (``"agent."``)."""
        steps, coeff = self.execute_steps, self.temporal_ensemble_coeff
        if horizon is None:
            expect(isinstance(steps, int) and steps >= 0, f"{prefix}execute_steps",
                   f"must be an integer in [0, the chunk size] (0: the whole chunk), got {steps}")  # fmt: skip
        else:
            check_execute_steps(steps, horizon, f"{prefix}execute_steps")
        if coeff is not None:
            expect(isinstance(coeff, (int, float)) and math.isfinite(coeff), f"{prefix}temporal_ensemble_coeff",
                   f"must be a finite float (ACT uses 0.01) or none, got {coeff}")  # fmt: skip
            expect(steps == 0, f"{prefix}temporal_ensemble_coeff",
                   f"computes a chunk every step and cannot be combined with execute_steps={steps}; set one of "
                   "them")  # fmt: skip

    def chunk_executor(self, chunk_fn: Callable[[TensorDict], torch.Tensor], horizon: int) -> ChunkExecutor:
        """The step policy that executes ``chunk_fn``'s chunks ``[M, horizon, A]`` as these fields say."""
        return ChunkExecutor(chunk_fn, horizon, self.execute_steps, self.temporal_ensemble_coeff)
