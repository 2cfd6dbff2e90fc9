"""Random Network Distillation (Burda et al. 2018, arXiv 1810.12894): curiosity as the error of a predictor network
trained to match a fixed, randomly initialized target network on the states visited.

States seen often are predicted well and earn little; new ones earn more. The intrinsic reward of a state ``s`` is
``weight * |f_target(s) - f_predictor(s)|`` divided by the running std of its discounted sum (reward
normalization, as the paper), with states normalized by running statistics first (state normalization).
Names follow rsl_rl's ``rnd_cfg``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.mlp import ACTIVATIONS, make_mlp
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.utils.validation import expect, finite


@dataclass
class RndCfg:
    """rsl_rl's ``rnd_cfg``. CLI: ``--agent.algorithm.rnd_cfg.<field>``. Off while ``weight`` is 0."""

    weight: float = 0.0
    """Intrinsic reward per second of the env's control period (rsl_rl's convention: the step's reward is
    ``weight * step_dt * normalized error``; an env without a control period uses ``weight`` per step). 0: off."""
    reward_normalization: bool = True
    """Divide the prediction error by the running std of its discounted sum (gamma 0.99, per env)."""
    state_normalization: bool = True
    """Normalize the RND state by running mean and std (updated on every rollout step)."""
    learning_rate: float = 1e-3
    """Adam learning rate of the predictor (one step per PPO mini-batch)."""
    num_outputs: int = 16
    """Embedding size of predictor and target."""
    predictor_hidden_dims: tuple[int, ...] = (128, 128)
    target_hidden_dims: tuple[int, ...] = (128, 128)
    activation: str = "elu"
    obs_groups: tuple[str, ...] = ()
    """Observation groups that make the RND state (rsl_rl's ``obs_groups["rnd_state"]``); empty: the critic's."""

    @property
    def enabled(self) -> bool:
        """Whether PPO adds curiosity."""
        return self.weight > 0

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for settings RND cannot run with."""
        expect(finite(self.weight) and self.weight >= 0, "weight", f"must be a finite number >= 0, got {self.weight}")
        lr = self.learning_rate
        expect(finite(lr) and lr > 0, "learning_rate", f"must be a finite number > 0, got {lr}")
        n = self.num_outputs
        expect(isinstance(n, int) and n >= 1, "num_outputs", f"must be an integer >= 1, got {n}")
        for name in ("predictor_hidden_dims", "target_hidden_dims"):
            dims = tuple(getattr(self, name))
            expect(all(isinstance(d, int) and d >= 1 for d in dims), name, f"must all be integers >= 1, got {dims}")
        act = self.activation
        expect(act in ACTIVATIONS, "activation", f"is unknown ({act!r}); use one of {', '.join(ACTIVATIONS)}")


class RandomNetworkDistillation(nn.Module):
    """Predictor, frozen target, normalizers and the predictor's optimizer (:attr:`optimizer`, checkpointed beside
    the module's :meth:`state_dict`, which holds the rest).

    Args:
        obs: an observation of the env (for the groups' sizes).
        groups: the groups that make the RND state.
        num_envs: envs per rollout step (for the per-env discounted sums of reward normalization).
        cfg: settings.
        weight: the intrinsic reward's weight per step (``cfg.weight`` times the control period).
    """

    gamma = 0.99
    """Discount of the intrinsic return whose std normalizes the reward."""

    def __init__(self, obs: TensorDict, groups: list[str], num_envs: int, cfg: RndCfg, weight: float) -> None:
        super().__init__()
        missing = [g for g in groups if g not in obs.keys()]
        if missing:
            raise ValueError(
                f"--agent.algorithm.rnd_cfg.obs_groups names {missing}, which the env does not have; it has "
                f"{list(obs.keys())}."
            )
        self.groups = groups
        self.cfg = cfg
        self.weight = weight
        num_states = sum(obs[g].shape[-1] for g in groups)
        self.predictor = make_mlp(num_states, cfg.predictor_hidden_dims, cfg.num_outputs, cfg.activation)
        self.target = make_mlp(num_states, cfg.target_hidden_dims, cfg.num_outputs, cfg.activation)
        self.target.requires_grad_(False)
        self.state_normalizer = EmpiricalNormalization(num_states) if cfg.state_normalization else nn.Identity()
        self.return_normalizer = EmpiricalNormalization(1) if cfg.reward_normalization else None
        self.register_buffer("intrinsic_return", torch.zeros(num_envs))
        self.intrinsic_return: torch.Tensor
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=cfg.learning_rate)

    def state(self, obs: TensorDict) -> torch.Tensor:
        """The RND state ``[B, D]``: the groups' columns side by side (not normalized)."""
        groups = self.groups
        return obs[groups[0]] if len(groups) == 1 else torch.cat([obs[g] for g in groups], -1)

    def prediction_error(self, state: torch.Tensor) -> torch.Tensor:
        """``|f_target(s) - f_predictor(s)| [B]`` of normalized states, without gradient."""
        with torch.no_grad():
            x = self.state_normalizer(state)
            return torch.linalg.vector_norm(self.target(x) - self.predictor(x), dim=-1)

    @torch.no_grad()
    def intrinsic_reward(self, obs: TensorDict) -> torch.Tensor:
        """The weighted, normalized intrinsic reward ``[N]`` of a rollout step's observations ``obs`` (the states
        reached); folds them into the state statistics and the reward into the return statistics first."""
        state = self.state(obs)
        if isinstance(self.state_normalizer, EmpiricalNormalization):
            self.state_normalizer.update(state)
        error = self.prediction_error(state)
        if self.return_normalizer is not None:
            self.intrinsic_return.mul_(self.gamma).add_(error)
            self.return_normalizer.update(self.intrinsic_return.unsqueeze(-1))
            error = error * torch.rsqrt(self.return_normalizer.var[0] + self.return_normalizer.eps)
        return self.weight * error

    def fit(self, obs: TensorDict) -> torch.Tensor:
        """One Adam step of the predictor on ``E[|f_target(s) - f_predictor(s)|^2]`` over ``obs``; returns the
        loss (detached)."""
        x = self.state_normalizer(self.state(obs)).detach()
        with torch.no_grad():
            target = self.target(x)
        loss = ((self.predictor(x) - target) ** 2).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()
