"""The rollout-and-update loop of on-policy RL, shared by PPO (:class:`~rslkit.runners.OnPolicyRunner`) and
ReinFlow (:class:`~rslkit.runners.reinflow_runner.ChainRunnerBase`): collect ``num_steps_per_env`` steps under
inference mode, bootstrap the returns, update, log."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch
from tensordict import TensorDict

from rslkit.algorithms.staleness import update_metrics
from rslkit.envs.vec_env import VecEnv
from rslkit.runners.base import BaseRunner
from rslkit.runners.checks import check_finite
from rslkit.runners.iteration_metrics import EnvLogMeans, perf_metrics
from rslkit.runners.run_config import RolloutCfg


class RolloutAlgorithm(Protocol):
    """What the loop needs of an on-policy algorithm (PPO, ReinFlow)."""

    def begin_rollout(self) -> None:
        """Prepare a rollout (outside inference mode)."""

    def act(self, obs: TensorDict) -> torch.Tensor:
        """Sample the actions of ``obs`` and remember what the update needs."""

    def process_env_step(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        """Store a step's transition."""

    def compute_returns(self, last_obs: TensorDict) -> None:
        """Bootstrap the rollout's returns from the observation after its last step."""

    def state_dict(self) -> dict:
        """Everything to checkpoint."""

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""


RolloutCfgT = TypeVar("RolloutCfgT", bound=RolloutCfg)
RolloutAlgT = TypeVar("RolloutAlgT", bound=RolloutAlgorithm)


class RolloutRunner(BaseRunner[RolloutCfgT, RolloutAlgT]):
    """One iteration: a rollout of ``cfg.num_steps_per_env`` steps of :attr:`rollout_env` from :attr:`_obs`
    (``alg.act`` -> env step -> NaN check -> ``alg.process_env_step``, with :meth:`_intrinsic_reward` added where
    the algorithm has one -> episode statistics of the env's reward), the bootstrap, the
    update, then the metrics: losses, :meth:`_policy_metrics`, episode statistics, the env's log, speed.

    A subclass sets :attr:`rollout_env`, :attr:`total_env_steps` and :attr:`_obs`, and provides the hooks.
    """

    rollout_env: VecEnv
    """The env the rollout steps (PPO: the env; ReinFlow: its action-chunk wrapper, one step = one decision)."""
    total_env_steps: int
    _obs: TensorDict
    """The observation the next rollout starts from (fetched again when :meth:`learn` starts)."""

    def _actor_obs(self, obs: TensorDict) -> TensorDict:
        """The observation the actor acts on (the env's; a VLA runner adds the instruction embedding)."""
        return obs

    def _record_step(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict[str, Any]) -> None:
        """Feed one rollout step (on the training device) to :attr:`stats`: the env's reward, dones and ``success``
        where the env reports it (a chunked rollout overrides this with the steps inside a decision)."""
        success = extras.get("success")
        self.stats.update(rewards, dones.bool(), success.to(self.device) if success is not None else None)

    def _intrinsic_reward(self) -> Callable[[TensorDict], torch.Tensor] | None:
        """The algorithm's intrinsic reward of the observations a step reached (PPO with RND), added to the env's
        reward for the update only (episode statistics keep the env's); None: none."""
        return None

    @abstractmethod
    def _update(self) -> dict[str, float]:
        """Update on the collected rollout; return the losses."""

    @abstractmethod
    def _env_steps(self) -> int:
        """Env steps of one rollout, all ranks."""

    @abstractmethod
    def _policy_metrics(self, obs: TensorDict) -> dict[str, float]:
        """``Loss/learning_rate``, ``Policy/*`` after the update (``obs``: the last observation)."""

    def _iteration(self) -> dict[str, float]:
        obs = self._obs
        t0 = time.perf_counter()
        env_log = EnvLogMeans()
        intrinsic = self._intrinsic_reward()
        self.alg.begin_rollout()
        with torch.inference_mode():
            for _ in range(self.cfg.num_steps_per_env):
                actions = self.alg.act(self._actor_obs(obs))
                obs, rewards, dones, extras = self.rollout_env.step(actions.to(self.env.device))
                obs, rewards, dones = obs.to(self.device), rewards.to(self.device), dones.to(self.device)
                if self.cfg.check_for_nan:
                    check_finite(obs, rewards)
                self.alg.process_env_step(rewards if intrinsic is None else rewards + intrinsic(obs), dones, extras)
                self._record_step(rewards, dones, extras)
                env_log.add(extras.get("log", {}))
            self.alg.compute_returns(obs)
        t1 = time.perf_counter()
        losses = self._update()
        t2 = time.perf_counter()
        steps = self._env_steps()
        self.total_env_steps += steps
        metrics = update_metrics(losses)
        metrics.update(self._policy_metrics(obs))
        metrics.update(self.stats.summary())
        metrics.update(env_log.metrics())
        metrics.update(perf_metrics(steps, t1 - t0, t2 - t1, self.total_env_steps))
        metrics["Perf/iteration_time"] = t2 - t0
        self._obs = obs
        return metrics
