"""On-policy runner: rollouts under inference mode, PPO updates, logging, checkpoints, exact resume."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict

from rslkit.algorithms.ppo import PPO
from rslkit.envs.vec_env import VecEnv
from rslkit.models.actor_critic import ActorCritic
from rslkit.runners.checks import check_finite
from rslkit.runners.config import PPORunnerCfg
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.allocator import tune_cpu_allocator
from rslkit.utils.checkpoint import checkpoint_must_fit, load_runner_checkpoint, save_checkpoint
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.logger import RunLogger, format_summary


def _discrete_choices(env: VecEnv, distribution: str) -> int | None:
    space = getattr(env, "action_space", None)
    if isinstance(space, gym.spaces.Discrete):
        if distribution != "categorical":
            raise ValueError(
                f"The env has a Discrete({space.n}) action space; set --agent.policy.distribution categorical."
            )
        return int(space.n)
    if distribution == "categorical":
        raise ValueError(
            "A categorical policy needs an env with a Discrete action_space; this env's actions are continuous: set "
            "--agent.policy.distribution gaussian (or tanh_gaussian / beta for bounded actions)."
        )
    return None


class OnPolicyRunner:
    """Trains a PPO actor-critic on a :class:`~rslkit.envs.VecEnv`.

    Args:
        env: the environment (rslkit task or any rsl_rl-style env).
        cfg: agent config.
        log_dir: run directory for checkpoints and logs; None for no files.
        device: training device (the env may live elsewhere; data is moved).
        dist_info: rank layout under torchrun; only rank 0 logs and saves.
        run_info: extra entries for the checkpoint (task name, env config) so ``play.py`` can rebuild the env.
    """

    def __init__(
        self,
        env: VecEnv,
        cfg: PPORunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        self.env = env
        self.cfg = cfg
        self.device = torch.device(device)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.dist = dist_info or DistInfo()
        self.run_info = run_info or {}
        obs = env.get_observations().to(self.device)
        num_choices = _discrete_choices(env, cfg.policy.distribution)
        policy = ActorCritic(obs, env.num_actions, cfg.policy, num_choices)
        self.alg = PPO(policy, cfg.algorithm, cfg.num_steps_per_env, obs, self.device)
        self.alg.broadcast_parameters()
        self.stats = EpisodeStats(env.num_envs, self.device, cfg.episode_stats_window)
        self.iteration = 0
        """The next iteration to run (also what checkpoints store)."""
        self.total_env_steps = 0

    @property
    def policy(self) -> ActorCritic:
        """The actor-critic being trained."""
        return self.alg.policy

    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic policy ``obs -> env actions`` for evaluation (recurrent state reset on episode ends by
        :meth:`reset_inference`)."""
        self.policy.eval()
        self.policy.reset()
        return self.policy.act_inference

    def reset_inference(self, dones: torch.Tensor) -> None:
        """Clear the recurrent state of finished episodes during evaluation."""
        self.policy.reset(dones)

    # ------------------------------------------------------------------ training loop
    def learn(self, num_iterations: int | None = None) -> dict[str, float]:
        """Run ``num_iterations`` iterations (default: up to ``cfg.max_iterations`` in total).

        Returns:
            The metrics of the last iteration.
        """
        end = self.iteration + num_iterations if num_iterations is not None else self.cfg.max_iterations
        if self.device.type == "cpu":
            tune_cpu_allocator()
        if self.cfg.init_at_random_ep_len and self.iteration == 0:
            self.env.episode_length_buf = torch.randint_like(
                self.env.episode_length_buf, high=int(self.env.max_episode_length)
            )
            self.stats.mark_partial()  # the first, shortened episodes are not real returns
        logger = RunLogger(
            self.log_dir if self.dist.is_main else None,
            total_iterations=end,
            start_iteration=self.iteration,
            backends=self.cfg.logger,
            config={"agent": to_dict(self.cfg), **self.run_info},
            quiet=not self.dist.is_main,
            wandb_project=self.cfg.wandb_project,
        )
        obs = self.env.get_observations().to(self.device)
        metrics: dict[str, float] = {}
        try:
            while self.iteration < end:
                metrics, obs = self._iteration(obs)
                if self.dist.is_main:
                    logger.log(self.iteration, metrics, format_summary(self.iteration, end, metrics))
                self.iteration += 1
                last = self.iteration == end
                if self.log_dir is not None and (self.iteration % self.cfg.save_interval == 0 or last):
                    self.save(self.log_dir / f"model_{self.iteration}.pt")
        finally:
            logger.close()
        return metrics

    def _iteration(self, obs: TensorDict) -> tuple[dict[str, float], TensorDict]:
        t0 = time.perf_counter()
        env_log: dict[str, list] = {}
        self.alg.begin_rollout()
        with torch.inference_mode():
            for _ in range(self.cfg.num_steps_per_env):
                actions = self.alg.act(obs)
                obs, rewards, dones, extras = self.env.step(actions.to(self.env.device))
                obs, rewards, dones = obs.to(self.device), rewards.to(self.device), dones.to(self.device)
                if self.cfg.check_for_nan:
                    check_finite(obs, rewards)
                self.alg.process_env_step(rewards, dones, extras)
                success = extras.get("success")
                self.stats.update(rewards, dones.bool(), success.to(self.device) if success is not None else None)
                for key, value in extras.get("log", {}).items():
                    env_log.setdefault(key, []).append(value)
            self.alg.compute_returns(obs)
        t1 = time.perf_counter()
        losses = self.alg.update()
        t2 = time.perf_counter()
        steps = self.cfg.num_steps_per_env * self.env.num_envs * self.dist.world_size
        self.total_env_steps += steps
        metrics = {f"Loss/{k}": v for k, v in losses.items()}
        metrics["Loss/learning_rate"] = self.alg.learning_rate
        metrics["Policy/mean_std"] = float(self._mean_std())
        metrics.update(self.stats.summary())
        for key, values in env_log.items():
            name = key.lstrip("/")
            metrics[name if "/" in name else f"Env/{name}"] = float(sum(float(v) for v in values) / len(values))
        metrics["Perf/steps_per_s"] = steps / (t2 - t0)
        metrics["Perf/collect_time"] = t1 - t0
        metrics["Perf/learn_time"] = t2 - t1
        metrics["Perf/total_env_steps"] = float(self.total_env_steps)
        return metrics, obs

    @torch.no_grad()
    def _mean_std(self) -> torch.Tensor:
        st = self.alg.storage
        if st.dist_params is None:
            return torch.tensor(float("nan"))
        params = tuple(p[0] for p in st.dist_params)
        return self.policy.dist.std(params).mean()

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path) -> None:
        """Write an atomic checkpoint: models, optimizer, normalizers, config, next iteration, RNG and env state."""
        save_checkpoint(
            path,
            {
                "algorithm": "ppo",
                "iteration": self.iteration,
                "total_env_steps": self.total_env_steps,
                "alg": self.alg.state_dict(),
                "agent_cfg": to_dict(self.cfg),
                **capture_run_state(self.env, self.stats),
                "hidden": self.policy.hidden_states(),
                **self.run_info,
            },
        )

    def load(self, path: str | Path, weights_only: bool = False) -> dict[str, Any]:
        """Resume from a checkpoint (or, with ``weights_only``, just take its policy weights).

        Raises:
            ValueError: if the checkpoint was made by another algorithm or an incompatible network.
        """
        data = load_runner_checkpoint(path, "ppo", self.device)
        with checkpoint_must_fit(path):
            if weights_only:
                self.policy.load_state_dict(data["alg"]["policy"])
                return data
            self.alg.load_state_dict(data["alg"])
        self.iteration = data["iteration"]
        self.total_env_steps = data.get("total_env_steps", 0)
        if self.dist.world_size == 1:
            restore_run_state(data, self.env, self.stats)
            actor_h, critic_h = data.get("hidden", (None, None))
            self.policy.actor_hidden, self.policy.critic_hidden = actor_h, critic_h
        return data
