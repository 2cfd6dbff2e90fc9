"""What behaviour cloning varies: the dataset/policy pair (:class:`BCData`) and the fields every BC run shares
(:class:`BCRunCfg`). :class:`~rslkit.runners.pretrain_runner.PretrainRunner` is the one loop over any pair:
``flow-bc`` (:mod:`rslkit.runners.flow_bc_data`) and ``vla-bc`` (:mod:`rslkit.runners.vla_bc_data`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.algorithms.lr_schedule import LRScheduleCfg
from rslkit.data.demonstrations import Demonstrations
from rslkit.data.episode_split import select_episodes, split_episodes
from rslkit.envs.vec_env import VecEnv
from rslkit.runners.bc_validation import ValBatch
from rslkit.runners.chunk_execution import ChunkExecutionCfg
from rslkit.runners.run_config import RunCfg
from rslkit.utils.validation import expect


class BCData(ABC):
    """A policy and the demonstrations it clones: builds the :class:`~rslkit.algorithms.flow_bc.FlowBC` algorithm,
    reads and checks the dataset, samples gradient steps, and turns the policy into a chunk function for evaluation.

    Args:
        env: the env the policy will run in (sizes, observation groups).
        device: training device.
        seed: the run's seed (for a pair with its own sampling generator).
    """

    alg: FlowBC
    """The algorithm (policy, EMA copy, optional probe, optimizer)."""
    dataset: object | None
    """The loaded training dataset (None until :meth:`load`)."""
    val_episodes: torch.Tensor | None = None
    """Indices of the dataset's episodes held out for validation (None until :meth:`load`; empty: none)."""

    @abstractmethod
    def load(self, fresh: bool) -> None:
        """Read the configured dataset and check it against the env; on a ``fresh`` run its statistics become the
        normalizers.

        Raises:
            ValueError: no dataset configured, or one that does not fit the env or the policy.
        """

    def split(
        self, demos: Demonstrations, val_fraction: float, seed: int
    ) -> tuple[Demonstrations, Demonstrations | None]:
        """``demos`` split by episodes into training and validation demonstrations (None: ``val_fraction`` 0) with
        :func:`~rslkit.data.episode_split.split_episodes`; sets :attr:`val_episodes`.

        Raises:
            ValueError: a fraction that leaves no training episode (names ``--agent.val_fraction``).
        """
        train, val = split_episodes(demos.num_episodes, val_fraction, seed)
        self.val_episodes = val
        if len(val) == 0:
            return demos, None
        return select_episodes(demos, train), select_episodes(demos, val)

    @abstractmethod
    def validation_batches(self, batch_size: int) -> Iterator[ValBatch]:
        """The validation examples in batches of ``batch_size``: raw observations and recorded chunks, the same at
        every call (nothing when no episode is held out)."""

    @abstractmethod
    def update(self, batch_size: int) -> dict[str, float]:
        """One gradient step on ``batch_size`` sampled examples; returns the losses."""

    @abstractmethod
    def chunk_fn(self, policy: torch.nn.Module) -> Callable[[TensorDict], torch.Tensor]:
        """``obs -> action chunks [N, Ta, A]`` of ``policy`` (the EMA copy) on the env's raw observations."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Checkpoint entries of the pair beside the algorithm's (a sampling generator)."""

    @abstractmethod
    def load_state_dict(self, data: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` entries from a checkpoint's ``data``."""


@dataclass
class BCRunCfg(RunCfg, ChunkExecutionCfg):
    """The fields of every behaviour cloning run. CLI: ``--agent.<field>`` (``train.py --dataset PATH`` sets
    ``dataset``)."""

    ALGORITHM: ClassVar[str]
    """The algorithm name of the run (checkpoints, ``--algo``)."""
    dataset: str = ""
    """LeRobotDataset v3.0 directory (``python -m rslkit.record`` writes one)."""
    algorithm: FlowBCCfg = field(default_factory=FlowBCCfg)
    max_iterations: int = 30
    updates_per_iteration: int = 100
    """Gradient steps per logged iteration."""
    eval_interval: int = 10
    """Iterations between evaluations (0: only the last): the validation episodes, and with a task one deterministic
    episode per env."""
    val_fraction: float = 0.0
    """Share of the dataset's episodes held out for validation (drawn with the run's seed; 0: none): each evaluation
    logs their flow loss and the error of sampled chunks against the recorded actions (``Val/*``)."""
    val_max_frames: int = 1024
    """Validation frames evaluated (evenly spread over the held-out episodes)."""
    lr_schedule: LRScheduleCfg = field(default_factory=LRScheduleCfg)
    """The learning rate over gradient steps (``constant``, or LeRobot's ``cosine_decay_with_warmup``)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the pretrain loop cannot run with."""
        super().check()
        updates = self.updates_per_iteration
        expect(isinstance(updates, int) and updates >= 1, "updates_per_iteration", f"must be >= 1, got {updates}")
        every = self.eval_interval
        expect(isinstance(every, int) and every >= 0, "eval_interval", f"must be >= 0 (0: only the last), got {every}")
        frac = self.val_fraction
        expect(isinstance(frac, (int, float)) and 0 <= frac < 1, "val_fraction", f"must be in [0, 1), got {frac}")
        frames = self.val_max_frames
        expect(isinstance(frames, int) and frames >= 1, "val_max_frames", f"must be an integer >= 1, got {frames}")

    @abstractmethod
    def make_data(self, env: VecEnv, device: torch.device, seed: int) -> BCData:
        """The dataset/policy pair of this run."""
