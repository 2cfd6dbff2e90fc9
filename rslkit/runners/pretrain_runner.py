"""Pretrain runner: behaviour cloning of a flow policy from a LeRobotDataset, evaluated in the env."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.data.checks import check_matches_env
from rslkit.data.chunking import ChunkDataset
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.envs.vec_env import VecEnv
from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.models.flow.policy import FlowPolicy, FlowPolicyCfg
from rslkit.runners.base import BaseRunner
from rslkit.runners.chunk_execution import ChunkExecutionCfg
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.run_config import RunCfg
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.validation import expect


@dataclass
class FlowBCRunnerCfg(RunCfg, ChunkExecutionCfg):
    """Behaviour cloning run. CLI: ``--agent.<field>`` (``train.py --dataset PATH`` sets ``dataset``)."""

    dataset: str = ""
    """LeRobotDataset v3.0 directory (``python -m rslkit.record`` writes one)."""
    algorithm: FlowBCCfg = field(default_factory=FlowBCCfg)
    policy: FlowPolicyCfg = field(default_factory=FlowPolicyCfg)
    max_iterations: int = 30
    updates_per_iteration: int = 100
    """Gradient steps per logged iteration."""
    eval_interval: int = 10
    """Iterations between evaluations in the env (one episode per env, deterministic ODE); 0: only the last."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the pretrain loop cannot run with."""
        super().check()
        updates = self.updates_per_iteration
        expect(isinstance(updates, int) and updates >= 1, "updates_per_iteration", f"must be >= 1, got {updates}")
        every = self.eval_interval
        expect(isinstance(every, int) and every >= 0, "eval_interval", f"must be >= 0 (0: only the last), got {every}")
        self.check_execution(self.policy.horizon)


def policy_obs_dim(env: VecEnv, group: str) -> int:
    """Size of observation group ``group`` of ``env``.

    Raises:
        ValueError: when the env has no such group or it is not ``[N, D]``.
    """
    obs = env.get_observations()
    if group not in obs.keys():
        raise ValueError(
            f"The env has no observation group '{group}' (it has {sorted(obs.keys())}); set agent.policy.obs_group."
        )
    if obs[group].dim() != 2:
        raise ValueError(f"Observation group '{group}' must be [num_envs, dim], got {list(obs[group].shape)}.")
    return int(obs[group].shape[-1])


@torch.inference_mode()
def evaluate_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    reset_policy: Callable[[torch.Tensor | None], None],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return and length (both ``[N]``) of one complete episode per env under ``policy`` (``obs -> actions [N, A]``).

    The env is reset first when it has ``reset()``; otherwise each env's first, partial episode is skipped. The
    global torch RNG is restored afterwards, so evaluating does not change the course of training (exact resume).
    """
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return _run_episodes(env, policy, reset_policy, device)


def _run_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    reset_policy: Callable[[torch.Tensor | None], None],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(env, "reset"):
        env.reset()
        counting = torch.ones(env.num_envs, dtype=torch.bool, device=device)
    else:
        counting = (env.episode_length_buf == 0).to(device)
    reset_policy(None)
    returns = torch.zeros(env.num_envs, device=device)
    lengths = torch.zeros(env.num_envs, device=device)
    finished = torch.zeros_like(counting)
    obs = env.get_observations().to(device)
    limit = 2 * int(torch.as_tensor(env.max_episode_length).max()) + 2
    for _ in range(limit):
        obs, rewards, dones, _ = env.step(policy(obs).to(env.device))
        obs, rewards, dones = obs.to(device), rewards.to(device), dones.to(device).bool()
        reset_policy(dones)
        active = counting & ~finished
        returns += rewards * active
        lengths += active.float()
        finished |= dones & active
        counting |= dones
        if bool(finished.all()):
            return returns, lengths
    raise RuntimeError(f"Evaluation: not every env finished an episode within {limit} steps.")


class PretrainRunner(BaseRunner[FlowBCRunnerCfg, FlowBC[FlowPolicy]]):
    """Behaviour cloning of a flow policy (same interface as :class:`~rslkit.runners.OnPolicyRunner`).

    The dataset is loaded when :meth:`learn` starts (so ``play.py`` can rebuild the runner without it), checked
    against the env's observation/action sizes, and its min-max statistics become the policy's normalizers. A
    :meth:`learn` iteration takes ``updates_per_iteration`` gradient steps; every ``eval_interval`` iterations and
    after the last, evaluation runs the EMA policy with the deterministic ODE, one episode per env, and its returns
    feed :attr:`stats`.

    Args:
        env: the environment the policy will run in (for sizes and evaluation).
        cfg: run config (``cfg.dataset`` names the demonstrations).
        log_dir: run directory; None for no files.
        device: training device.
        dist_info: behaviour cloning runs in one process.
        run_info: extra checkpoint entries (task name, env config).
    """

    algorithm_name = "flow-bc"

    def __init__(
        self,
        env: VecEnv,
        cfg: FlowBCRunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        obs_dim = policy_obs_dim(env, cfg.policy.obs_group)
        self.alg = FlowBC(FlowPolicy(obs_dim, env.num_actions, cfg.policy), cfg.algorithm, self.device)
        self.stats = EpisodeStats(env.num_envs, self.device)
        self.dataset: ChunkDataset | None = None
        self._executor: ChunkExecutor | None = None

    @property
    def policy(self) -> FlowPolicy:
        """The deployed policy: the EMA copy of the trained weights."""
        return self.alg.ema.model

    # ------------------------------------------------------------------ data
    def load_dataset(self) -> ChunkDataset:
        """Read ``cfg.dataset``, check it against the env and set the normalizers (on a fresh run).

        Raises:
            ValueError: when no dataset is configured or it does not match the env.
        """
        if not self.cfg.dataset:
            raise ValueError("Behaviour cloning needs demonstrations: pass --dataset PATH (or --agent.dataset PATH).")
        demos = read_lerobot_dataset(self.cfg.dataset)
        check_matches_env(demos, self.alg.policy.obs_dim, self.env.num_actions, "the env")
        if self.iteration == 0:
            self.alg.policy.set_normalization(demos.stats)
            self.alg.ema.model.set_normalization(demos.stats)
        policy = self.alg.policy
        self.dataset = ChunkDataset(
            demos,
            self.cfg.policy.horizon,
            self.device,
            policy.max_future_offset,
            policy.state_slice,
            self.cfg.policy.future_state_source,
        )
        return self.dataset

    # ------------------------------------------------------------------ inference
    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic step policy ``obs -> actions [N, A]`` executing EMA-policy chunks."""
        policy, group = self.policy, self.cfg.policy.obs_group
        self._executor = self.cfg.chunk_executor(lambda obs: policy.act_chunk(obs[group]), policy.horizon)
        return self._executor

    def reset_inference(self, dones: torch.Tensor | None) -> None:
        """Start a new chunk for envs whose episode ended."""
        if self._executor is not None:
            self._executor.reset(dones)

    def evaluate(self) -> dict[str, float]:
        """One deterministic episode per env; returns ``Eval/mean_return`` and ``Eval/std_return``."""
        returns, lengths = evaluate_episodes(self.env, self.inference_policy(), self.reset_inference, self.device)
        self.stats.finished_returns.clear()
        self.stats.finished_lengths.clear()
        self.stats.finished_returns.extend(returns.tolist())
        self.stats.finished_lengths.extend(lengths.tolist())
        self.stats.num_finished += returns.numel()
        return {"Eval/mean_return": float(returns.mean()), "Eval/std_return": float(returns.std())}

    # ------------------------------------------------------------------ training loop
    def _start_learning(self) -> None:
        if self.dataset is None:
            self.load_dataset()

    def _iteration(self) -> dict[str, float]:
        dataset = self.dataset
        assert dataset is not None
        t0 = time.perf_counter()
        sums: dict[str, float] = {}
        self.alg.policy.train()
        offsets = self.alg.policy.max_future_offset > 0  # VLASH: (o_t, s_{t+delta}, a_{t+delta:})
        for _ in range(self.cfg.updates_per_iteration):
            if offsets:
                batch = dataset.sample_offset(self.cfg.algorithm.batch_size)
                losses = self.alg.update(batch.obs, batch.actions, batch.future_state)
            else:
                obs, actions, _ = dataset.sample(self.cfg.algorithm.batch_size)
                losses = self.alg.update(obs, actions)
            for key, value in losses.items():
                sums[key] = sums.get(key, 0.0) + value
        elapsed = time.perf_counter() - t0
        n = max(1, self.cfg.updates_per_iteration)
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
        """Policy, EMA policy, optimizer, config, RNG state, env state and episode statistics (evaluation episodes
        of a resumed run start where the uninterrupted run's would)."""
        return {
            "alg": self.alg.state_dict(),
            "agent_cfg": to_dict(self.cfg),
            **capture_run_state(self.env, self.stats),
        }

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.alg.policy.load_state_dict(alg_state["policy"])
        self.alg.ema.load_state_dict(alg_state["ema"])

    def _restore(self, data: dict[str, Any]) -> None:
        restore_run_state(data, self.env, self.stats)
