"""SAC's networks: a squashed-Gaussian actor, Q critics (a twin or an ensemble) with Polyak targets, normalizers.

The losses that train them live in :mod:`rslkit.algorithms.sac`; export (:mod:`rslkit.deploy`) needs only these.
Notation: ``s`` observation, ``u`` pre-squash Gaussian sample, ``a = tanh(u)``, ``Q_1 .. Q_E`` critics (``E = 2``:
SAC's twin critics; ``E > 2``: an ensemble as in REDQ, Chen et al. 2021, and RLPD, Ball et al. 2023).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
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
    num_critics: int = 2
    """Q critics ``E``: 2 is SAC's twin (clipped double Q); more is an ensemble evaluated in batched matmuls (RLPD
    uses 10 with ``algorithm.critic_subset = 2``). Checkpoint keys: ``critic.q1.*``/``critic.q2.*`` for 2,
    ``critic.net.*`` (stacked ``[E, ...]`` weights) otherwise."""
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
        e = self.num_critics
        expect(isinstance(e, int) and e >= 2, "num_critics", f"must be an integer >= 2, got {e}")


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


def _activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"Unknown activation '{name}'; choose one of {sorted(ACTIVATIONS)}.")
    return ACTIVATIONS[name]()


class TwinQ(nn.Module):
    """Two independent critics ``Q_1(s, a), Q_2(s, a)`` (clipped double Q, Fujimoto et al. 2018)."""

    num_critics = 2

    def __init__(self, obs_dim: int, num_actions: int, cfg: SACNetworkCfg) -> None:
        super().__init__()
        self.q1 = self._make(obs_dim + num_actions, cfg)
        self.q2 = self._make(obs_dim + num_actions, cfg)

    @staticmethod
    def _make(in_dim: int, cfg: SACNetworkCfg) -> nn.Sequential:
        if not cfg.critic_layer_norm:
            return make_mlp(in_dim, cfg.critic_hidden_dims, 1, cfg.activation)
        layers: list[nn.Module] = []
        dims = [in_dim, *cfg.critic_hidden_dims]
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(d_in, d_out), nn.LayerNorm(d_out), _activation(cfg.activation)]
        layers.append(nn.Linear(dims[-1], 1))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``x [B, D], a [B, A]`` -> ``[2, B]``: ``Q_1`` and ``Q_2`` stacked (``q1, q2 = critic(x, a)`` unpacks)."""
        xa = torch.cat((x, a), dim=-1)
        return torch.stack((self.q1(xa).squeeze(-1), self.q2(xa).squeeze(-1)))


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers in one batched matmul: ``[E, B, in] -> [E, B, out]``.

    Each member is initialized like ``nn.Linear``: weights and biases ``U(-1/sqrt(in), 1/sqrt(in))``.
    """

    def __init__(self, num: int, d_in: int, d_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(num, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num, 1, d_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [E, B, in]`` -> ``bias + x @ weight`` ``[E, B, out]``."""
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate affine transform per member: ``[E, B, d] -> [E, B, d]``."""

    def __init__(self, num: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num, 1, dim))
        self.bias = nn.Parameter(torch.zeros(num, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:]) * self.weight + self.bias


class EnsembleQ(nn.Module):
    """``E`` independent critics ``Q_1 .. Q_E`` evaluated together (REDQ, RLPD): the same layers as :class:`TwinQ`'s,
    with every weight stacked ``[E, ...]``."""

    def __init__(self, obs_dim: int, num_actions: int, cfg: SACNetworkCfg) -> None:
        super().__init__()
        self.num_critics = e = cfg.num_critics
        layers: list[nn.Module] = []
        dims = [obs_dim + num_actions, *cfg.critic_hidden_dims]
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            layers.append(EnsembleLinear(e, d_in, d_out))
            if cfg.critic_layer_norm:
                layers.append(EnsembleLayerNorm(e, d_out))
            layers.append(_activation(cfg.activation))
        layers.append(EnsembleLinear(e, dims[-1], 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``x [B, D], a [B, A]`` -> ``[E, B]``, row ``j`` is ``Q_j(s, a)``."""
        xa = torch.cat((x, a), dim=-1)
        return self.net(xa.expand(self.num_critics, *xa.shape)).squeeze(-1)


def make_critics(obs_dim: int, num_actions: int, cfg: SACNetworkCfg) -> TwinQ | EnsembleQ:
    """:class:`TwinQ` for ``cfg.num_critics == 2``, else :class:`EnsembleQ`; both map ``(x, a)`` to ``[E, B]``.

    Raises:
        ValueError: for fewer than 2 critics.
    """
    if not isinstance(cfg.num_critics, int) or cfg.num_critics < 2:
        raise ValueError(f"agent.policy.num_critics must be an integer >= 2, got {cfg.num_critics}.")
    if cfg.num_critics == 2:
        return TwinQ(obs_dim, num_actions, cfg)
    return EnsembleQ(obs_dim, num_actions, cfg)


class SACModel(nn.Module):
    """Normalizers (shared by actor, critics and target critics), actor, ``E`` critics and their targets."""

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
        self.critic = make_critics(sum(dims[g] for g in self.critic_groups), num_actions, cfg)
        """``(x [B, D_critic], a [B, A]) -> [E, B]``."""
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)

    @property
    def num_critics(self) -> int:
        """Critics ``E``."""
        return self.critic.num_critics

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
