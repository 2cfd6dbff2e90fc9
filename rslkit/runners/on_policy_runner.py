"""On-policy runner: PPO on the shared rollout loop (:mod:`rslkit.runners.rollout_runner`), exact resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict

from rslkit.algorithms.ppo import PPO
from rslkit.algorithms.symmetry import make_mirror
from rslkit.envs.vec_env import VecEnv, control_period
from rslkit.models.actor_critic import ActorCritic
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.rollout_runner import RolloutRunner
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo


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


class OnPolicyRunner(RolloutRunner[PPORunnerCfg, PPO]):
    """Trains a PPO actor-critic on a :class:`~rslkit.envs.VecEnv` (the loop: :class:`~rslkit.runners.rollout_runner.
    RolloutRunner`).

    Args:
        env: the environment (rslkit task or any rsl_rl-style env).
        cfg: agent config.
        log_dir: run directory for checkpoints and logs; None for no files.
        device: training device (the env may live elsewhere; data is moved).
        dist_info: rank layout under torchrun; only rank 0 logs and saves.
        run_info: extra entries for the checkpoint (task name, env config) so ``play.py`` can rebuild the env.
    """

    algorithm_name = "ppo"
    distributed = True

    def __init__(
        self,
        env: VecEnv,
        cfg: PPORunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        obs = env.get_observations().to(self.device)
        num_choices = _discrete_choices(env, cfg.policy.distribution)
        policy = ActorCritic(obs, env.num_actions, cfg.policy, num_choices)
        symmetry = cfg.algorithm.symmetry_cfg
        mirror = make_mirror(symmetry, env) if symmetry.enabled else None
        self.alg = PPO(policy, cfg.algorithm, cfg.num_steps_per_env, obs, self.device, mirror, control_period(env))
        self.alg.broadcast_parameters()
        self.stats = EpisodeStats(env.num_envs, self.device, cfg.episode_stats_window)
        self.rollout_env = env
        self.total_env_steps = 0
        self._obs = obs

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
    def _start_learning(self) -> None:
        self._check_mini_batches()
        if self.cfg.init_at_random_ep_len and self.iteration == 0:
            self._spread_episode_starts()
        self._obs = self.env.get_observations().to(self.device)

    def _check_mini_batches(self) -> None:
        """Training needs a sample (recurrent: an env) per mini-batch; evaluation with fewer envs is fine."""
        cfg, recurrent = self.cfg, self.policy.is_recurrent
        samples = self.env.num_envs if recurrent else self.env.num_envs * cfg.num_steps_per_env
        if cfg.algorithm.num_mini_batches > samples:
            unit = "envs (recurrent mini-batches split whole env sequences)" if recurrent else "samples per rollout"
            raise ValueError(
                f"--agent.algorithm.num_mini_batches {cfg.algorithm.num_mini_batches} exceeds the {samples} {unit}; "
                "lower it, or raise --num_envs / --agent.num_steps_per_env."
            )

    def _update(self) -> dict[str, float]:
        return self.alg.update()

    def _env_steps(self) -> int:
        return self.cfg.num_steps_per_env * self.env.num_envs * self.dist.world_size

    def _intrinsic_reward(self) -> Callable[[TensorDict], torch.Tensor] | None:
        return self.alg.intrinsic_reward if self.alg.rnd is not None else None

    def _policy_metrics(self, obs: TensorDict) -> dict[str, float]:
        metrics = {"Loss/learning_rate": self.alg.learning_rate, "Policy/mean_std": float(self._mean_std())}
        if self.alg.rnd is not None:
            metrics["RND/mean_intrinsic_reward"] = self.alg.pop_intrinsic_reward_mean()
        return metrics

    @torch.no_grad()
    def _mean_std(self) -> torch.Tensor:
        st = self.alg.storage
        if st.dist_params is None:
            return torch.tensor(float("nan"))
        params = tuple(p[0] for p in st.dist_params)
        return self.policy.dist.std(params).mean()

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict[str, Any]:
        """Models, optimizer, normalizers, config, env steps, RNG, env and recurrent state."""
        return {
            "total_env_steps": self.total_env_steps,
            "alg": self.alg.state_dict(),
            "agent_cfg": to_dict(self.cfg),
            **capture_run_state(self.env, self.stats),
            "hidden": self.policy.hidden_states(),
        }

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.policy.load_state_dict(alg_state["policy"])

    def _restore(self, data: dict[str, Any]) -> None:
        self.total_env_steps = data.get("total_env_steps", 0)
        if self.dist.world_size == 1:
            restore_run_state(data, self.env, self.stats)
            actor_h, critic_h = data.get("hidden", (None, None))
            self.policy.actor_hidden, self.policy.critic_hidden = actor_h, critic_h
