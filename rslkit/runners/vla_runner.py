"""VLA behaviour cloning: a :class:`~rslkit.models.vla.VLAPolicy` from a LeRobotDataset with camera videos and
language tasks, evaluated in the env with success per instruction.

The env must provide the policy's state group and its ``camera_<name>`` groups (``--env.cameras``), and an
instruction per env: ``env.instructions`` (strings) with an observation group ``goal`` holding each env's index
into them (``so101-pick-place``), or one fixed ``agent.instruction`` for all envs. Instructions are embedded with
the sentence encoder ``agent.text_encoder`` (MiniLM from its PyPI wheel by default; never downloaded).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.data.checks import check_matches_env
from rslkit.data.demonstrations import ENV_STATE_KEY, Demonstrations
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.data.vla_dataset import VLAChunkDataset, random_shift
from rslkit.envs.camera_groups import camera_group
from rslkit.envs.columns import select_state_columns
from rslkit.envs.vec_env import VecEnv
from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.models.text_encoder import MINILM
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.policy import INSTRUCTION_GROUP, VLAPolicy
from rslkit.models.vla.state_probe import StateProbe
from rslkit.runners.base import BaseRunner
from rslkit.runners.chunk_execution import ChunkExecutionCfg
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.instructed_env import EnvInstructions, run_instructed_episodes
from rslkit.runners.pretrain_runner import policy_obs_dim
from rslkit.runners.run_config import RunCfg
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.validation import expect


@dataclass
class VLABCRunnerCfg(RunCfg, ChunkExecutionCfg):
    """VLA behaviour cloning run. CLI: ``--agent.<field>`` (``train.py --dataset PATH`` sets ``dataset``)."""

    dataset: str = ""
    """LeRobotDataset v3.0 directory with the policy's cameras and a task per episode."""
    algorithm: FlowBCCfg = field(default_factory=FlowBCCfg)
    policy: VLAPolicyCfg = field(default_factory=lambda: VLAPolicyCfg(language_dim=384))
    text_encoder: str = MINILM
    """Sentence encoder of the instructions (``minilm`` or a local ``transformers`` directory); its embedding size
    must be ``policy.language_dim``."""
    instruction: str = ""
    """The instruction of every env, for envs without ``instructions`` (empty: the env must provide them)."""
    augment_shift: int = 4
    """Random shifts of up to this many pixels per camera image in training (0: off)."""
    aux_state: str = ""
    """Env observation group recorded as the dataset's ``observation.environment_state`` (``python -m rslkit.record
    --env_state_group G``): BC then also regresses it from the observation tokens (a
    :class:`~rslkit.models.vla.state_probe.StateProbe`, weight ``algorithm.aux_state_coef``), so the image encoder
    learns where the objects are. A training aid: the policy's inputs and its export do not change. Empty: off."""
    aux_state_columns: str = ""
    """The columns of ``aux_state`` the probe regresses: indices, ``start:stop`` ranges and globs over the group's
    ``observation_names`` (``cube.*,cube_minus_grasp_point.*``); empty: all. Columns that the state input or a
    moving arm already give away (joint positions, the goal) dilute the signal for the image encoder."""
    max_iterations: int = 30
    updates_per_iteration: int = 100
    eval_interval: int = 10
    """Iterations between evaluations in the env (one episode per env, deterministic ODE); 0: only the last."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the loop cannot run with."""
        super().check()
        updates = self.updates_per_iteration
        expect(isinstance(updates, int) and updates >= 1, "updates_per_iteration", f"must be >= 1, got {updates}")
        every = self.eval_interval
        expect(isinstance(every, int) and every >= 0, "eval_interval", f"must be >= 0 (0: only the last), got {every}")
        self.check_execution(self.policy.horizon)
        shift = self.augment_shift
        expect(isinstance(shift, int) and shift >= 0, "augment_shift", f"must be an integer >= 0, got {shift}")
        expect(self.policy.language_dim > 0, "policy.language_dim", "must be > 0: a VLA policy reads instructions")


class VLAPretrainRunner(BaseRunner[VLABCRunnerCfg, FlowBC[VLAPolicy]]):
    """Behaviour cloning of a VLA policy (same interface as :class:`~rslkit.runners.PretrainRunner`).

    The dataset (state, the configured cameras, tasks) is loaded when :meth:`learn` starts and checked against the
    env; on a fresh run its statistics become the policy's normalizers (state, action, instruction embeddings). An
    iteration takes ``updates_per_iteration`` gradient steps on randomly shifted frames; evaluations run the EMA
    policy with the deterministic ODE, one episode per env, and report success overall and per instruction.

    Args:
        env: the environment (sizes, cameras, instructions, evaluation).
        cfg: run config.
        log_dir: run directory; None for no files.
        device: training device.
        dist_info: behaviour cloning runs in one process.
        run_info: extra checkpoint entries (task name, env config).
    """

    algorithm_name = "vla-bc"

    def __init__(
        self,
        env: VecEnv,
        cfg: VLABCRunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        state_dim = policy_obs_dim(env, cfg.policy.state_group)
        policy = VLAPolicy(state_dim, env.num_actions, cfg.policy)
        probe = None
        self.aux_columns = torch.zeros(0, dtype=torch.long)
        """Columns of the aux_state group the probe regresses (empty without a probe)."""
        if cfg.aux_state:
            groups = sorted(env.get_observations().keys())
            if cfg.aux_state not in groups:
                raise ValueError(
                    f"--agent.aux_state has no observation group '{cfg.aux_state}' in the env (it has {groups}): name "
                    "the group recorded as the dataset's observation.environment_state."
                )
            dim = policy_obs_dim(env, cfg.aux_state)
            names = (getattr(env, "observation_names", None) or {}).get(cfg.aux_state)
            self.aux_columns = torch.tensor(select_state_columns(cfg.aux_state_columns, dim, names))
            probe = StateProbe(policy.tokenizer.num_tokens, cfg.policy.d_model, len(self.aux_columns))
        self.alg = FlowBC(policy, cfg.algorithm, self.device, probe)
        self.stats = EpisodeStats(env.num_envs, self.device)
        self.dataset: VLAChunkDataset | None = None
        self.instructions = EnvInstructions(
            env, cfg.text_encoder, cfg.policy.language_dim, self.device, cfg.instruction
        )  # fmt: skip
        self._task_embeddings: torch.Tensor | None = None
        self._executor: ChunkExecutor | None = None
        self._generator = torch.Generator().manual_seed(int((run_info or {}).get("seed", 0)))

    @property
    def policy(self) -> VLAPolicy:
        """The deployed policy: the EMA copy of the trained weights."""
        return self.alg.ema.model

    # ------------------------------------------------------------------ language
    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Raw sentence embeddings ``[len(texts), E]`` on the training device (cached per text).

        Raises:
            ValueError: the encoder's size is not ``policy.language_dim``.
        """
        return self.instructions.embed(texts)

    def env_instructions(self, obs: TensorDict) -> torch.Tensor:
        """Each env's raw instruction embedding ``[N, E]``.

        Raises:
            ValueError: the env provides no instructions and ``agent.instruction`` is empty.
        """
        return self.instructions(obs)

    def with_instruction(self, obs: TensorDict) -> TensorDict:
        """``obs`` with the ``instruction`` group added (the policy's input)."""
        return self.instructions.add_to(obs)

    # ------------------------------------------------------------------ data
    def load_dataset(self) -> VLAChunkDataset:
        """Read ``cfg.dataset`` with the policy's cameras, check it against the env, set the normalizers (fresh run).

        Raises:
            ValueError: no dataset configured, or one that does not match the env or lacks cameras or tasks.
        """
        if not self.cfg.dataset:
            raise ValueError("Behaviour cloning needs demonstrations: pass --dataset PATH (or --agent.dataset PATH).")
        cameras = list(self.cfg.policy.cameras)
        demos = read_lerobot_dataset(self.cfg.dataset, cameras=cameras)
        policy = self.alg.policy
        check_matches_env(demos, policy.obs_dim, self.env.num_actions, "the env")
        size = tuple(self.cfg.policy.image_size)
        for cam in cameras:
            h, w = demos.images[cam].shape[1:3]
            if (h, w) != size:
                raise ValueError(
                    f"Camera {cam!r} of the dataset is {h}x{w}, the policy takes {size[0]}x{size[1]}: set "
                    f"--agent.policy.image_size {h},{w} (the recording's size), or re-record at {size[0]}x{size[1]}."
                )
        self._check_aux_state(demos)
        self.dataset = VLAChunkDataset(demos, cameras, self.cfg.policy.horizon)
        self._task_embeddings = self.embed(demos.tasks)
        if self.iteration == 0 and self.alg.probe is not None:
            stats = demos.stats[ENV_STATE_KEY]
            low, high = (torch.tensor(stats[k])[self.aux_columns] for k in ("min", "max"))
            self.alg.probe.normalizer.set_stats(low, high)
        if self.iteration == 0:
            for p in (policy, self.alg.ema.model):
                p.set_normalization(demos.stats)
                p.set_instruction_stats(self._task_embeddings)
        return self.dataset

    def _check_aux_state(self, demos: Demonstrations) -> None:
        probe = self.alg.probe
        if probe is None:
            return
        if demos.env_state is None:
            raise ValueError(
                f"--agent.aux_state {self.cfg.aux_state} needs the dataset's {ENV_STATE_KEY}, which "
                f"{self.cfg.dataset} lacks: record it with `python -m rslkit.record ... --env_state_group "
                f"{self.cfg.aux_state}`, or turn the probe off with --agent.aux_state= (an empty value)."
            )
        expected = policy_obs_dim(self.env, self.cfg.aux_state)
        if demos.env_state.shape[1] != expected:
            raise ValueError(
                f"The dataset's {ENV_STATE_KEY} has {demos.env_state.shape[1]} columns, the env's group "
                f"{self.cfg.aux_state!r} {expected}: record the group named by --agent.aux_state."
            )

    def batch(self, batch_size: int) -> tuple[TensorDict, torch.Tensor, torch.Tensor | None]:
        """A training batch: raw observation groups ``[B]`` (shifted frames), action chunks ``[B, Ta, A]`` and, with
        ``aux_state``, the frames' privileged state ``[B, E]`` (else None)."""
        assert self.dataset is not None and self._task_embeddings is not None
        rows = torch.randint(len(self.dataset), (batch_size,), generator=self._generator)
        state, frames, task, actions = self.dataset.get(rows)
        groups = {self.cfg.policy.state_group: state, INSTRUCTION_GROUP: self._task_embeddings[task.to(self.device)]}
        for cam, images in frames.items():
            groups[camera_group(cam)] = random_shift(images, self.cfg.augment_shift, self._generator)
        env_state = self.dataset.demos.env_state
        aux = None if self.alg.probe is None or env_state is None else env_state[rows][:, self.aux_columns]
        return TensorDict(groups, batch_size=[batch_size]).to(self.device), actions, aux

    # ------------------------------------------------------------------ inference
    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic step policy ``obs -> actions [N, A]`` executing EMA-policy chunks."""
        policy = self.policy
        self._executor = self.cfg.chunk_executor(
            lambda obs: policy.act_chunk(self.with_instruction(obs)), policy.horizon
        )
        return self._executor

    def reset_inference(self, dones: torch.Tensor | None) -> None:
        """Start a new chunk for envs whose episode ended."""
        if self._executor is not None:
            self._executor.reset(dones)

    def evaluate(self) -> dict[str, float]:
        """One deterministic episode per env: ``Eval/mean_return``, ``Eval/mean_episode_length``,
        ``Eval/success_rate`` and, for envs with instructions, ``Eval/success/<instruction index>``."""
        episodes = run_instructed_episodes(self.env, self.inference_policy(), self.reset_inference)
        for buffer, values in ((self.stats.finished_returns, episodes.returns),
                               (self.stats.finished_lengths, episodes.lengths),
                               (self.stats.finished_success, episodes.success.float())):  # fmt: skip
            buffer.clear()
            buffer.extend(values.tolist())
        self.stats.num_finished += self.env.num_envs
        return episodes.metrics()

    # ------------------------------------------------------------------ training loop
    def _start_learning(self) -> None:
        if self.dataset is None:
            self.load_dataset()

    def _iteration(self) -> dict[str, float]:
        t0 = time.perf_counter()
        sums: dict[str, float] = {}
        self.alg.policy.train()
        for _ in range(self.cfg.updates_per_iteration):
            obs, actions, aux = self.batch(self.cfg.algorithm.batch_size)
            for key, value in self.alg.update(obs, actions, aux_state=aux).items():
                sums[key] = sums.get(key, 0.0) + value
        elapsed = time.perf_counter() - t0
        n = self.cfg.updates_per_iteration
        metrics = {f"Loss/{k}": v / n for k, v in sums.items()}
        metrics["Loss/learning_rate"] = self.cfg.algorithm.learning_rate
        metrics["Perf/updates_per_s"] = n / elapsed
        metrics["Perf/learn_time"] = elapsed
        return metrics

    def _after_iteration(self, metrics: dict[str, float], last: bool) -> None:
        interval = self.cfg.eval_interval
        if last or (interval > 0 and self.iteration % interval == 0):
            metrics.update(self.evaluate())
            metrics.update(self.stats.summary())

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict[str, Any]:
        """Policy, EMA policy, optimizer, config, sampling generator, RNG and env state, episode statistics."""
        return {
            "alg": self.alg.state_dict(),
            "agent_cfg": to_dict(self.cfg),
            "sampling_generator": self._generator.get_state(),
            **capture_run_state(self.env, self.stats),
        }

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.alg.policy.load_state_dict(alg_state["policy"])
        self.alg.ema.load_state_dict(alg_state["ema"])

    def _restore(self, data: dict[str, Any]) -> None:
        restore_run_state(data, self.env, self.stats)
        if "sampling_generator" in data:
            self._generator.set_state(data["sampling_generator"])
