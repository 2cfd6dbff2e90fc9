"""Pretrain runner: behaviour cloning of a flow or VLA policy from a LeRobotDataset, evaluated on held-out episodes
and, beside a simulated task, in the env.

The one BC loop; what differs between ``flow-bc`` and ``vla-bc`` (the policy, how the dataset is read and sampled,
what the policy reads at evaluation) is the run config's dataset/policy pair (:class:`~rslkit.runners.bc_data.
BCData`). A run from a dataset alone gets a :class:`~rslkit.data.dataset_spec.DatasetSpec` for its env: the same
pair sizes its policy from it, and evaluation skips the rollouts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC
from rslkit.data.dataset_spec import DatasetSpec
from rslkit.envs.vec_env import VecEnv
from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.runners.base import BaseRunner
from rslkit.runners.bc_data import BCRunCfg
from rslkit.runners.bc_validation import validation_metrics
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.evaluation import evaluate_episodes
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo


class PretrainRunner(BaseRunner[BCRunCfg, FlowBC]):
    """Behaviour cloning (same interface as :class:`~rslkit.runners.OnPolicyRunner`); ``flow-bc`` or ``vla-bc`` as
    the config says (:class:`~rslkit.runners.flow_bc_data.FlowBCRunnerCfg`,
    :class:`~rslkit.runners.vla_bc_data.VLABCRunnerCfg`).

    The dataset is loaded when :meth:`learn` starts (so ``play.py`` can rebuild the runner without it) and checked
    against the env; on a fresh run its statistics become the policy's normalizers. A :meth:`learn` iteration takes
    ``updates_per_iteration`` gradient steps at the rates of ``cfg.lr_schedule``; every ``eval_interval`` iterations
    and after the last, evaluation runs the EMA policy on the validation episodes (``Val/*``, with
    ``val_fraction > 0``) and, in a simulated env, with the deterministic ODE for one episode per env (success overall
    and per instruction where the env reports them), whose episodes feed :attr:`stats`.

    Args:
        env: the environment the policy will run in (for sizes and evaluation), or the
            :class:`~rslkit.data.dataset_spec.DatasetSpec` of a run without a simulator.
        cfg: run config (``cfg.dataset`` names the demonstrations).
        log_dir: run directory; None for no files.
        device: training device.
        dist_info: behaviour cloning runs in one process.
        run_info: extra checkpoint entries (task name, env config; ``seed`` seeds a pair's sampling generator).
    """

    def __init__(
        self,
        env: VecEnv,
        cfg: BCRunCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        self.algorithm_name = cfg.ALGORITHM
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        self.data = cfg.make_data(env, self.device, int((run_info or {}).get("seed", 0)))
        """The dataset/policy pair."""
        self.alg = self.data.alg
        self.stats = EpisodeStats(env.num_envs, self.device)
        self._executor: ChunkExecutor | None = None
        self.rollouts = not isinstance(env, DatasetSpec)
        """Whether evaluation runs episodes in the env (False: a dataset's spec stands in for it)."""
        self._seed = int((run_info or {}).get("seed", 0))

    @property
    def policy(self) -> torch.nn.Module:
        """The deployed policy: the EMA copy of the trained weights."""
        return self.alg.ema.model

    def load_dataset(self) -> None:
        """Read and check the dataset (:meth:`BCData.load`); on a fresh run (iteration 0) set the normalizers.

        Raises:
            ValueError: no dataset configured, or one that does not fit the env or the policy.
        """
        self.data.load(fresh=self.iteration == 0)

    # ------------------------------------------------------------------ inference
    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic step policy ``obs -> actions [N, A]`` executing EMA-policy chunks."""
        policy = self.policy
        self._executor = self.cfg.chunk_executor(self.data.chunk_fn(policy), self.alg.policy.horizon)
        return self._executor

    def reset_inference(self, dones: torch.Tensor | None) -> None:
        """Start a new chunk for envs whose episode ended."""
        if self._executor is not None:
            self._executor.reset(dones)

    def evaluate(self) -> dict[str, float]:
        """:meth:`validate`, then (with a simulator) :meth:`evaluate_rollouts`."""
        metrics = self.validate()
        if self.rollouts:
            metrics.update(self.evaluate_rollouts())
        return metrics

    def validate(self) -> dict[str, float]:
        """The EMA policy's ``Val/*`` metrics on the held-out episodes
        (:func:`~rslkit.runners.bc_validation.validation_metrics`); empty without any (``val_fraction`` 0: the
        dataset is then not needed, e.g. to evaluate a checkpoint elsewhere)."""
        if self.cfg.val_fraction == 0:
            return {}
        if self.data.dataset is None:
            self.load_dataset()
        names = getattr(self.env, "action_names", None) or [str(i) for i in range(self.env.num_actions)]
        batches = self.data.validation_batches(self.cfg.algorithm.batch_size)
        return validation_metrics(self.alg.ema.model, batches, names, self._seed)

    def evaluate_rollouts(self) -> dict[str, float]:
        """One deterministic episode per env (:func:`~rslkit.runners.evaluation.evaluate_episodes`): its ``Eval/*``
        metrics; the episodes replace the window of :attr:`stats`."""
        episodes = evaluate_episodes(self.env, self.inference_policy(), self.reset_inference, self.device)
        finished = [(self.stats.finished_returns, episodes.returns), (self.stats.finished_lengths, episodes.lengths)]
        if episodes.has_success:
            finished.append((self.stats.finished_success, episodes.success.float()))
        for buffer, values in finished:
            buffer.clear()
            buffer.extend(values.tolist())
        self.stats.num_finished += self.env.num_envs
        return episodes.metrics()

    # ------------------------------------------------------------------ training loop
    def _start_learning(self) -> None:
        if self.data.dataset is None:
            self.load_dataset()

    def _iteration(self) -> dict[str, float]:
        t0 = time.perf_counter()
        sums: dict[str, float] = {}
        self.alg.policy.train()
        n = self.cfg.updates_per_iteration
        total = self.cfg.max_iterations * n
        peak = lr = self.cfg.algorithm.learning_rate
        for k in range(n):
            lr = self.cfg.lr_schedule.apply(self.alg.optimizer, self.iteration * n + k, peak, total)
            for key, value in self.data.update(self.cfg.algorithm.batch_size).items():
                sums[key] = sums.get(key, 0.0) + value
        elapsed = time.perf_counter() - t0
        metrics = {f"Loss/{k}": v / n for k, v in sums.items()}
        metrics["Loss/learning_rate"] = lr
        metrics["Perf/updates_per_s"] = n / elapsed
        metrics["Perf/learn_time"] = elapsed
        return metrics

    def _after_iteration(self, metrics: dict[str, float], last: bool) -> None:
        interval = self.cfg.eval_interval
        if last or (interval > 0 and self.iteration % interval == 0):
            metrics.update(self.evaluate())
            if self.rollouts:
                metrics.update(self.stats.summary())

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict[str, Any]:
        """Policy, EMA policy, optimizer, config, the pair's state (sampling generator), RNG and env state, episode
        statistics (evaluation episodes of a resumed run start where the uninterrupted run's would)."""
        return {
            "alg": self.alg.state_dict(),
            "agent_cfg": to_dict(self.cfg),
            **self.data.state_dict(),
            **capture_run_state(self.env, self.stats),
        }

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.alg.policy.load_state_dict(alg_state["policy"])
        self.alg.ema.load_state_dict(alg_state["ema"])

    def _restore(self, data: dict[str, Any]) -> None:
        restore_run_state(data, self.env, self.stats)
        self.data.load_state_dict(data)
