"""Off-policy runner: vectorized env steps into a replay buffer, SAC updates, logging, checkpoints, exact resume."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict

from rslkit.algorithms.sac import SAC, SACModel
from rslkit.envs.vec_env import VecEnv
from rslkit.runners.base import BaseRunner
from rslkit.runners.checks import check_finite
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.iteration_metrics import EnvLogMeans, perf_metrics
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.storage.replay_buffer import ReplayBuffer
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo


def check_continuous(env: VecEnv) -> None:
    """SAC needs continuous actions.

    Raises:
        ValueError: for an env whose ``action_space`` is a gymnasium ``Discrete`` space.
    """
    space = getattr(env, "action_space", None)
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        raise ValueError(
            f"SAC needs a continuous (Box) action space, but this env's is {space}; train it with --algo ppo "
            "(categorical policy) instead, or switch the task to continuous actions where it has that option "
            "(cartpole: --env.action_type continuous)."
        )


class OffPolicyRunner(BaseRunner[SACRunnerCfg, SAC]):
    """Trains SAC on a :class:`~rslkit.envs.VecEnv` (same interface as :class:`OnPolicyRunner`).

    The env may report ``extras["final_obs"]`` (batch ``[N]``, the observation reached before an auto-reset: the
    Gymnasium adapter always does, rslkit tasks once the runner calls their ``request_final_obs()``); time-outs
    then bootstrap from it. Without it, a timed-out transition cannot be bootstrapped and is left out of the critic
    loss (its n-step predecessors bootstrap from the step before).

    Resuming with :meth:`load` is exact (same as the uninterrupted run) when the checkpoint holds the replay buffer
    and the env provides ``state_dict``; otherwise the buffer refills from scratch before updates resume.

    Args:
        env: the environment (rslkit task or any rsl_rl-style env) with continuous actions in ``[-1, 1]``.
        cfg: agent config.
        log_dir: run directory for checkpoints and logs; None for no files.
        device: training device (the env may live elsewhere; data is moved).
        dist_info: rank layout; SAC runs in one process.
        run_info: extra entries for the checkpoint (task name, env config) so ``play.py`` can rebuild the env.

    Raises:
        ValueError: for discrete-action envs, multi-process runs or missing observation groups.
    """

    algorithm_name = "sac"

    def __init__(
        self,
        env: VecEnv,
        cfg: SACRunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        check_continuous(env)
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        if cfg.num_steps_per_env < 1:
            raise ValueError(f"agent.num_steps_per_env must be >= 1, got {cfg.num_steps_per_env}.")
        if callable(getattr(env, "request_final_obs", None)):
            env.request_final_obs()  # type: ignore[attr-defined]
        obs = env.get_observations().to(self.device)
        model = SACModel(obs, env.num_actions, cfg.policy)
        self.alg = SAC(model, cfg.algorithm, env.num_actions, self.device)
        self.buffer: ReplayBuffer | None = None
        """Allocated on the first :meth:`learn` (or when a checkpoint with replay contents is loaded)."""
        self.stats = EpisodeStats(env.num_envs, self.device, cfg.episode_stats_window)
        self.env_steps = 0
        """Vectorized env steps taken (each is ``num_envs`` transitions)."""
        self._obs = obs
        """The observation the next env step starts from (fetched again when :meth:`learn` starts)."""

    @property
    def policy(self) -> SACModel:
        """The networks being trained (actor with its normalizers, critics, targets)."""
        return self.alg.model

    @property
    def total_env_steps(self) -> int:
        """Transitions collected so far."""
        return self.env_steps * self.env.num_envs

    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic policy ``obs -> actions tanh(μ(s))`` for evaluation."""
        self.policy.eval()
        return self.policy.act_inference

    def reset_inference(self, dones: torch.Tensor) -> None:
        """Nothing to reset: the SAC policy is feed-forward."""

    def _ensure_buffer(self) -> ReplayBuffer:
        if self.buffer is None:
            obs = self.env.get_observations().to(self.device).select(*self.policy.obs_groups)
            self.buffer = ReplayBuffer(obs, self.env.num_actions, self.cfg.replay, self.device)
            if self.cfg.demo_path:
                # Imported here: rslkit.data brings pyarrow, which a run without demonstrations skips.
                from rslkit.data.transitions import load_demonstrations

                group, terminal = self.policy.actor_groups[0], self.cfg.demo_done_is_terminal
                self.buffer.add_demonstrations(load_demonstrations(self.cfg.demo_path, group, terminal))
        return self.buffer

    # ------------------------------------------------------------------ training loop
    def _start_learning(self) -> None:
        self._ensure_buffer()
        if self.cfg.init_at_random_ep_len and self.iteration == 0:
            self._spread_episode_starts()
        self._obs = self.env.get_observations().to(self.device)

    def _act(self, obs: TensorDict) -> torch.Tensor:
        if self.env_steps < self.cfg.random_steps:
            return torch.rand(self.env.num_envs, self.env.num_actions, device=self.device) * 2.0 - 1.0
        return self.policy.act(obs)

    def _iteration(self) -> dict[str, float]:
        assert self.buffer is not None
        obs = self._obs
        collect_time = learn_time = 0.0
        env_log = EnvLogMeans()
        sums: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        num_updates = 0
        for _ in range(self.cfg.num_steps_per_env):
            t0 = time.perf_counter()
            with torch.no_grad():
                self.policy.update_normalization(obs)
                actions = self._act(obs)
                next_obs, rewards, dones, extras = self.env.step(actions.to(self.env.device))
            next_obs, rewards, dones = next_obs.to(self.device), rewards.to(self.device), dones.to(self.device).bool()
            if self.cfg.check_for_nan:
                check_finite(next_obs, rewards)
            time_outs = extras.get("time_outs")
            time_outs = dones & time_outs.to(self.device).bool() if time_outs is not None else torch.zeros_like(dones)
            final_obs = extras.get("final_obs")
            if final_obs is not None:
                true_next, next_valid = final_obs.to(self.device), torch.ones_like(dones)
            else:
                true_next, next_valid = next_obs, ~time_outs
            self.buffer.add(obs, actions, rewards, true_next, dones & ~time_outs, time_outs, next_valid)
            success = extras.get("success")
            self.stats.update(rewards, dones, success.to(self.device) if success is not None else None)
            env_log.add(extras.get("log", {}))
            obs = next_obs
            self.env_steps += 1
            t1 = time.perf_counter()
            collect_time += t1 - t0
            if self.buffer.online.size >= self.cfg.learning_starts:
                c = self.cfg.algorithm
                for _ in range(self.alg.updates_due()):
                    out = self.alg.update(self.buffer.sample(c.batch_size, c.n_step, c.gamma))
                    for key, value in out.items():
                        sums[key] = sums.get(key, 0.0) + value
                        counts[key] = counts.get(key, 0) + 1
                    num_updates += 1
            learn_time += time.perf_counter() - t1
        self._obs = obs
        return self._metrics(sums, counts, env_log, num_updates, collect_time, learn_time)

    def _metrics(
        self,
        sums: dict[str, torch.Tensor],
        counts: dict[str, int],
        env_log: EnvLogMeans,
        num_updates: int,
        collect_time: float,
        learn_time: float,
    ) -> dict[str, float]:
        names = {
            "value": "Loss/value",
            "actor": "Loss/actor",
            "alpha_loss": "Loss/alpha",
            "q": "Policy/mean_q",
            "target_q": "Policy/mean_target_q",
            "entropy": "Policy/entropy",
        }
        metrics = {names[k]: float(v) / counts[k] for k, v in sums.items()}
        metrics["Policy/alpha"] = float(self.alg.alpha)
        metrics["Loss/learning_rate"] = self.cfg.algorithm.actor_lr
        metrics.update(self.stats.summary())
        metrics.update(env_log.metrics())
        steps = self.cfg.num_steps_per_env * self.env.num_envs
        metrics.update(perf_metrics(steps, collect_time, learn_time, self.total_env_steps))
        metrics["Perf/updates"] = float(num_updates)
        metrics["Train/replay_size"] = float(len(self.buffer)) if self.buffer is not None else 0.0
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict[str, Any]:
        """Networks, optimizers, temperature, normalizers, config, env steps, RNG, env state, and the replay buffer
        when ``cfg.replay.save_in_checkpoint``."""
        replay = None
        if self.cfg.replay.save_in_checkpoint and self.buffer is not None:
            replay = self.buffer.state_dict()
        return {
            "total_env_steps": self.total_env_steps,
            "env_steps": self.env_steps,
            "alg": self.alg.state_dict(),
            "agent_cfg": to_dict(self.cfg),
            **capture_run_state(self.env, self.stats),
            "replay": replay,
        }

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.policy.load_state_dict(alg_state["model"])

    def _restore(self, data: dict[str, Any]) -> None:
        self.env_steps = data.get("env_steps", 0)
        restore_run_state(data, self.env, self.stats)
        if data.get("replay") is not None:
            self._ensure_buffer().load_state_dict(data["replay"])
