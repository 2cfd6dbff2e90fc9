"""``flow-bc``: a state-only :class:`~rslkit.models.flow.FlowPolicy` cloned from a LeRobotDataset's states and
actions (with VLASH future-state offsets where the policy reads a future state)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC
from rslkit.data.checks import check_matches_env
from rslkit.data.chunking import ChunkDataset
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.envs.vec_env import VecEnv
from rslkit.models.flow.policy import FlowPolicy, FlowPolicyCfg
from rslkit.runners.bc_data import BCData, BCRunCfg
from rslkit.runners.bc_validation import ValBatch, evenly_spaced
from rslkit.runners.checks import policy_obs_dim


@dataclass
class FlowBCRunnerCfg(BCRunCfg):
    """Behaviour cloning of a flow policy. CLI: ``--agent.<field>`` (``train.py --dataset PATH`` sets ``dataset``)."""

    ALGORITHM: ClassVar[str] = "flow-bc"
    policy: FlowPolicyCfg = field(default_factory=FlowPolicyCfg)

    def check(self) -> None:
        """:meth:`BCRunCfg.check` and the chunk execution against the policy's horizon."""
        super().check()
        self.check_execution(self.policy.horizon)

    def make_data(self, env: VecEnv, device: torch.device, seed: int) -> FlowBCData:
        """A :class:`FlowBCData` of this config."""
        return FlowBCData(env, self, device, seed)


class FlowBCData(BCData):
    """A flow policy over the env's ``policy.obs_group`` and the chunks of a dataset's states and actions.

    Batches are drawn with the global torch RNG (what the runner's checkpoints restore); the validation split with
    the run's ``seed``.
    """

    def __init__(self, env: VecEnv, cfg: FlowBCRunnerCfg, device: torch.device, seed: int) -> None:
        self.env, self.cfg, self.seed = env, cfg, seed
        obs_dim = policy_obs_dim(env, cfg.policy.obs_group)
        self.alg: FlowBC[FlowPolicy] = FlowBC(FlowPolicy(obs_dim, env.num_actions, cfg.policy), cfg.algorithm, device)
        self.dataset: ChunkDataset | None = None
        self.val_dataset: ChunkDataset | None = None

    def load(self, fresh: bool) -> None:
        """Read ``cfg.dataset``, check it against the env and set the normalizers (on a ``fresh`` run).

        Raises:
            ValueError: when no dataset is configured or it does not match the env.
        """
        if not self.cfg.dataset:
            raise ValueError("Behaviour cloning needs demonstrations: pass --dataset PATH (or --agent.dataset PATH).")
        demos = read_lerobot_dataset(self.cfg.dataset)
        policy = self.alg.policy
        check_matches_env(demos, policy.obs_dim, self.env.num_actions, "the env")
        if fresh:
            policy.set_normalization(demos.stats)
            self.alg.ema.model.set_normalization(demos.stats)
        train, val = self.split(demos, self.cfg.val_fraction, self.seed)
        self.dataset = ChunkDataset(
            train,
            self.cfg.policy.horizon,
            self.alg.device,
            policy.max_future_offset,
            policy.state_slice,
            self.cfg.policy.future_state_source,
        )
        self.val_dataset = None if val is None else ChunkDataset(val, self.cfg.policy.horizon, self.alg.device)

    def validation_batches(self, batch_size: int) -> Iterator[ValBatch]:
        """``(o_t, a_t:)`` of up to ``val_max_frames`` held-out frames (the observed state as the future state)."""
        if self.val_dataset is None:
            return
        rows = evenly_spaced(len(self.val_dataset), self.cfg.val_max_frames)
        for batch in rows.split(batch_size):
            obs, actions, _ = self.val_dataset.get(batch)
            yield obs, actions

    def update(self, batch_size: int) -> dict[str, float]:
        """One step on ``(o_t, a_t:)`` chunks, or VLASH's ``(o_t, s_{t+delta}, a_{t+delta:})`` for a policy with
        future-state offsets."""
        assert self.dataset is not None, "load() first"
        if self.alg.policy.max_future_offset > 0:
            batch = self.dataset.sample_offset(batch_size)
            return self.alg.update(batch.obs, batch.actions, batch.future_state)
        obs, actions, _ = self.dataset.sample(batch_size)
        return self.alg.update(obs, actions)

    def state_dict(self) -> dict[str, Any]:
        """Nothing beside the algorithm: batches come from the global RNG, which the runner's checkpoints restore."""
        return {}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""

    def chunk_fn(self, policy: torch.nn.Module) -> Callable[[TensorDict], torch.Tensor]:
        """Chunks of ``policy`` from the observation group ``policy.obs_group``."""
        assert isinstance(policy, FlowPolicy)
        group = self.cfg.policy.obs_group
        return lambda obs: policy.act_chunk(obs[group])
