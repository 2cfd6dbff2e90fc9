"""SAC's networks: a squashed-Gaussian actor, twin Q critics with Polyak targets and per-group normalizers.

The losses that train them live in :mod:`rslkit.algorithms.sac`; export (:mod:`rslkit.deploy`) needs only these.
Notation: ``s`` observation, ``u`` pre-squash Gaussian sample, ``a = tanh(u)``, ``Q_1, Q_2`` twin critics.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.distributions import LOG_SQRT_2PI, log_one_minus_tanh_sq
from rslkit.models.mlp import ACTIVATIONS, check_actor_critic_mlps, make_mlp
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.models.obs_groups import resolve_obs_groups
from rslkit.utils.validation import expect, finite


@dataclass
class SACNetworkCfg:
    """Actor and critic networks. CLI: ``--agent.policy.<field>``."""

    actor_hidden_dims: tuple[int, ...] = (256, 256)
    critic_hidden_dims: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    critic_layer_norm: bool = False
    """LayerNorm after every hidden critic layer (stabilizes large-batch, high-UTD training)."""
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    obs_normalization: bool = True
    """Running mean/std normalization per observation group, updated from every env step."""
    actor_obs_groups: tuple[str, ...] = ("policy",)
    critic_obs_groups: tuple[str, ...] = ()
    """Empty: the env's ``critic`` group if it has one (asymmetric critic), else the actor's groups."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for networks that cannot be built."""
        check_actor_critic_mlps(self)
        lo, hi = self.log_std_min, self.log_std_max
        expect(finite(lo), "log_std_min", f"must be finite, got {lo}")
        expect(finite(hi) and hi > lo, "log_std_max", f"must be finite and > log_std_min ({lo}), got {hi}")


def squashed_gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Exact ``log π(a|s)`` of ``a = tanh(u)``, ``u ~ N(mean, exp(log_std)^2)``, by change of variables.

    ``log π(a|s) = Σ_i [ log N(u_i; μ_i, σ_i) - log(1 - tanh(u_i)^2) ]`` (SAC paper, appendix C), with the
    Jacobian term in the stable form ``2 (log 2 - u - softplus(-2u))``.

    Args:
        mean, log_std, u: ``[B, A]``.

    Returns:
        ``[B]``.
    """
    z = (u - mean) * torch.exp(-log_std)
    gaussian = (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(-1)
    return gaussian - log_one_minus_tanh_sq(u).sum(-1)


class SquashedGaussianActor(nn.Module):
    """``π(a|s)``: an MLP gives ``μ(s)`` and ``log σ(s)``; ``a = tanh(μ + σ ε)``, ``ε ~ N(0, I)``."""

    def __init__(self, obs_dim: int, num_actions: int, cfg: SACNetworkCfg) -> None:
        super().__init__()
        self.net = make_mlp(obs_dim, cfg.actor_hidden_dims, 2 * num_actions, cfg.activation)
        self.log_std_min, self.log_std_max = cfg.log_std_min, cfg.log_std_max

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, D]`` -> ``(mean [B, A], log_std [B, A])``; ``log_std`` squashed smoothly into its bounds."""
        mean, log_std = self.net(x).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(log_std) + 1.0)
        return mean, log_std

    def sample(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized ``(a [B, A], log π(a|s) [B])``."""
        mean, log_std = self(x)
        u = mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(u), squashed_gaussian_log_prob(mean, log_std, u)


class TwinQ(nn.Module):
    """Two independent critics ``Q_1(s, a), Q_2(s, a)`` (clipped double Q, Fujimoto et al. 2018)."""

    def __init__(self, obs_dim: int, num_actions: int, cfg: SACNetworkCfg) -> None:
        super().__init__()
        self.q1 = self._make(obs_dim + num_actions, cfg)
        self.q2 = self._make(obs_dim + num_actions, cfg)

    @staticmethod
    def _make(in_dim: int, cfg: SACNetworkCfg) -> nn.Sequential:
        if not cfg.critic_layer_norm:
            return make_mlp(in_dim, cfg.critic_hidden_dims, 1, cfg.activation)
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(f"Unknown activation '{cfg.activation}'; choose one of {sorted(ACTIVATIONS)}.")
        layers: list[nn.Module] = []
        dims = [in_dim, *cfg.critic_hidden_dims]
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(d_in, d_out), nn.LayerNorm(d_out), ACTIVATIONS[cfg.activation]()]
        layers.append(nn.Linear(dims[-1], 1))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, D], a [B, A]`` -> ``(Q_1 [B], Q_2 [B])``."""
        xa = torch.cat((x, a), dim=-1)
        return self.q1(xa).squeeze(-1), self.q2(xa).squeeze(-1)


class SACModel(nn.Module):
    """Normalizers (shared by actor, critics and target critics), actor, twin critics and their targets."""

    def __init__(self, obs: TensorDict, num_actions: int, cfg: SACNetworkCfg) -> None:
        super().__init__()
        groups = resolve_obs_groups(obs, cfg.actor_obs_groups, cfg.critic_obs_groups)
        self.actor_groups, self.critic_groups = groups["actor"], groups["critic"]
        used = list(dict.fromkeys(self.actor_groups + self.critic_groups))
        dims = {g: obs[g].shape[-1] for g in used}
        self.normalizers = nn.ModuleDict(
            {g: EmpiricalNormalization(dims[g]) if cfg.obs_normalization else nn.Identity() for g in used}
        )
        self.actor = SquashedGaussianActor(sum(dims[g] for g in self.actor_groups), num_actions, cfg)
        self.critic = TwinQ(sum(dims[g] for g in self.critic_groups), num_actions, cfg)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)

    @property
    def obs_groups(self) -> list[str]:
        """Every observation group the model reads (what the replay buffer must store)."""
        return list(self.normalizers.keys())

    def _input(self, obs: TensorDict, groups: list[str]) -> torch.Tensor:
        parts = [self.normalizers[g](obs[g]) for g in groups]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def actor_input(self, obs: TensorDict) -> torch.Tensor:
        """Normalized, concatenated actor groups ``[B, D_actor]``."""
        return self._input(obs, self.actor_groups)

    def critic_input(self, obs: TensorDict) -> torch.Tensor:
        """Normalized, concatenated critic groups ``[B, D_critic]``."""
        return self._input(obs, self.critic_groups)

    def act(self, obs: TensorDict) -> torch.Tensor:
        """Stochastic actions ``[N, A]`` in ``(-1, 1)`` for exploration."""
        return self.actor.sample(self.actor_input(obs))[0]

    def act_inference(self, obs: TensorDict) -> torch.Tensor:
        """Deterministic actions ``tanh(μ(s))`` ``[N, A]`` for evaluation and deployment."""
        return torch.tanh(self.actor(self.actor_input(obs))[0])

    @torch.no_grad()
    def update_normalization(self, obs: TensorDict) -> None:
        """Fold observations ``[N]`` into each group's running statistics."""
        for g, norm in self.normalizers.items():
            if isinstance(norm, EmpiricalNormalization):
                norm.update(obs[g])
