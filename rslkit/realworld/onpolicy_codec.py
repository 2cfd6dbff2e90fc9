"""What an on-policy algorithm puts into a rollout and takes out of one: PPO's and ReinFlow's sides of the wire.

An actor acts with :meth:`RolloutCodec.act` (behaviour log-probs, PPO's distribution parameters, ReinFlow's whole
noisy chain) and steps its env with :meth:`RolloutCodec.step`; the learner rebuilds the algorithm's own
:class:`~rslkit.storage.rollout_storage.RolloutStorage` from the arrays with :meth:`RolloutCodec.fill`: values from
its current critic, time-outs bootstrapped and GAE as the algorithm's synchronous runner does, the behaviour
log-probs and policy versions exactly as the actors recorded them. The runners' own algorithms then update.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.algorithms.gae import bootstrap_time_outs
from rslkit.link.rollouts import RolloutSchema
from rslkit.link.wire import ArraySpec
from rslkit.realworld.weights import load_state_arrays, state_arrays
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.reinflow_runner import ReinFlowRunner
from rslkit.storage.rollout_storage import RolloutStorage

Steps = dict[str, torch.Tensor]
"""``{name: [N, ...]}`` of one step, or ``[T, N, ...]`` of a rollout."""


def _spec(t: torch.Tensor) -> ArraySpec:
    """The per-env spec of a ``[N, ...]`` tensor."""
    return ArraySpec(tuple(int(d) for d in t.shape[1:]), "bool" if t.dtype == torch.bool else "float32")


class RolloutCodec(ABC):
    """The shared part: the schema from one step's arrays, stepping, and the per-step bookkeeping."""

    runner: Any

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.env = runner.env

    @property
    def num_steps(self) -> int:
        """``T``: decisions per env and rollout."""
        return int(self.runner.cfg.num_steps_per_env)

    def schema(self, num_envs: int) -> RolloutSchema:
        """The schema of one actor's rollout with ``num_envs`` envs (shapes from the env and the policy)."""
        obs = self.env.get_observations()[:1]
        with torch.inference_mode():
            _, rec = self.act(obs)
        step = rec | self.step_extras(torch.zeros(1), torch.zeros(1, dtype=torch.bool), {})
        obs_specs = {g: ArraySpec(tuple(obs[g].shape[1:]), "float32") for g in self.obs_groups()}
        return RolloutSchema(self.num_steps, num_envs, obs_specs, {k: _spec(v) for k, v in step.items()})

    @abstractmethod
    def obs_groups(self) -> list[str]:
        """The observation groups actor and critic read (what a rollout carries)."""

    @abstractmethod
    def act(self, obs: TensorDict) -> tuple[torch.Tensor, Steps]:
        """Env actions for ``obs [N]`` and what the rollout records of them (``action``, ``log_prob``, ...)."""

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step the actor's env (ReinFlow: one decision of ``Ta`` env steps)."""
        return self.env.step(actions)

    def env_steps(self) -> int:
        """Env steps per decision."""
        return 1

    def step_extras(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict[str, Any]) -> Steps:
        """The per-step arrays besides the action's: reward, done, time_out, success (and the algorithm's own)."""
        n = rewards.shape[0]
        time_outs = extras.get("time_outs", torch.zeros(n, dtype=torch.bool))
        success = extras.get("success", torch.zeros(n, dtype=torch.bool))
        return {
            "reward": rewards.float(),
            "done": dones.bool(),
            "time_out": time_outs.bool() & dones.bool(),
            "success": success.bool(),
        }

    def weights(self) -> dict[str, np.ndarray]:
        """What the learner publishes for acting."""
        return state_arrays(self.acting_module())

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Take published weights (the actor, between rollouts)."""
        load_state_arrays(self.acting_module(), arrays)

    @abstractmethod
    def acting_module(self) -> torch.nn.Module:
        """The module whose state acts."""

    @abstractmethod
    def make_storage(self, num_envs: int) -> RolloutStorage:
        """The algorithm's storage for ``num_envs`` envs in all (B rollouts side by side)."""

    @abstractmethod
    def fill(self, obs: TensorDict, step: Steps, versions: torch.Tensor) -> None:
        """Build the algorithm's rollout from ``obs [T + 1, M]`` and ``step [T, M, ...]`` (M = B x N envs, the
        rollouts side by side), ``versions [M]`` the weights version of each column; then GAE."""


class PPOCodec(RolloutCodec):
    """PPO: raw actions, behaviour log-probs and distribution parameters (``params.i``, for the adaptive KL)."""

    runner: OnPolicyRunner

    def __init__(self, runner: OnPolicyRunner) -> None:
        super().__init__(runner)
        if runner.policy.is_recurrent:
            raise ValueError(
                "The asynchronous PPO learner takes feed-forward policies (a rollout from an actor carries no hidden "
                "state); set --agent.policy.rnn_type none."
            )

    def obs_groups(self) -> list[str]:
        groups = self.runner.policy.obs_groups
        return list(dict.fromkeys([*groups["actor"], *groups["critic"]]))

    def act(self, obs: TensorDict) -> tuple[torch.Tensor, Steps]:
        policy = self.runner.policy
        raw, log_prob, _, params = policy.act(obs)
        rec = {"action": raw, "log_prob": log_prob} | {f"params.{i}": p for i, p in enumerate(params)}
        return policy.to_env(raw), rec

    def acting_module(self) -> torch.nn.Module:
        return self.runner.policy

    def make_storage(self, num_envs: int) -> RolloutStorage:
        alg, obs = self.runner.alg, self.env.get_observations()[:1].to(self.runner.device)
        num_params = len([k for k in self.schema(1).step if k.startswith("params.")])
        big = obs.expand(num_envs).clone()
        return RolloutStorage(self.num_steps, big, alg.policy.dist.raw_dim, num_params, alg.device, self.obs_groups())

    def fill(self, obs: TensorDict, step: Steps, versions: torch.Tensor) -> None:
        alg = self.runner.alg
        num_params = len([k for k in step if k.startswith("params.")])
        for t in range(self.num_steps):
            value = alg.policy.value(obs[t])
            rewards = bootstrap_time_outs(step["reward"][t], value, step["time_out"][t], alg.cfg.gamma)
            params = tuple(step[f"params.{i}"][t] for i in range(num_params))
            alg.storage.add(
                obs[t], step["action"][t], step["log_prob"][t], value, rewards, step["done"][t], params, versions
            )
        alg.compute_returns(obs[self.num_steps])


class ReinFlowCodec(RolloutCodec):
    """ReinFlow: the whole noisy chain ``a_0 .. a_K`` of each decision and its normalized log-likelihood, the
    decision's discount ``gamma^n`` (time-out bootstrap) and its undiscounted env reward (episode statistics)."""

    runner: ReinFlowRunner

    def obs_groups(self) -> list[str]:
        return [self.runner.cfg.policy.obs_group]

    def act(self, obs: TensorDict) -> tuple[torch.Tensor, Steps]:
        alg = self.runner.alg
        obs_n = alg.normalized_obs(obs)
        chain = alg.chain.sample(obs_n)
        log_prob, _ = alg.chain.normalized_log_prob(obs_n, chain)
        return alg.to_env(chain[:, -1]), {"action": chain.flatten(1), "log_prob": log_prob}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        return self.runner.chunk_env.step(actions)

    def env_steps(self) -> int:
        return int(self.runner.chunk_env.horizon)

    def step_extras(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict[str, Any]) -> Steps:
        out = super().step_extras(rewards, dones, extras)
        discount = extras.get("discount", torch.full_like(rewards.float(), self.runner.alg.chunk_gamma))
        step_rewards = extras.get("step_rewards", rewards[:, None])
        return out | {"discount": discount.float(), "env_reward": step_rewards.float().sum(-1)}

    def acting_module(self) -> torch.nn.Module:
        return self.runner.alg.chain

    def make_storage(self, num_envs: int) -> RolloutStorage:
        alg, obs = self.runner.alg, self.env.get_observations()[:1].to(self.runner.device)
        big = obs.expand(num_envs).clone()
        return RolloutStorage(self.num_steps, big, alg.chain.chain_dim, 0, alg.device, self.obs_groups())

    def fill(self, obs: TensorDict, step: Steps, versions: torch.Tensor) -> None:
        alg = self.runner.alg
        for t in range(self.num_steps):
            value = alg.value(obs[t])
            rewards = step["reward"][t] * alg.cfg.reward_scale
            rewards = bootstrap_time_outs(rewards, value, step["time_out"][t], step["discount"][t])
            alg.storage.add(
                obs[t], step["action"][t], step["log_prob"][t], value, rewards, step["done"][t], (), versions
            )
        alg.compute_returns(obs[self.num_steps])


def codec_for(runner: Any) -> RolloutCodec:
    """The codec of a runner's algorithm (PPO's or ReinFlow's)."""
    if isinstance(runner, ReinFlowRunner):
        return ReinFlowCodec(runner)
    if isinstance(runner, OnPolicyRunner):
        return PPOCodec(runner)
    raise ValueError(f"The on-policy loop runs ppo and reinflow, not {type(runner).__name__}.")
