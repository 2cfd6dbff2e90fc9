"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") for massively parallel envs.

Built for thousands of envs in the spirit of FastTD3 / FastSAC (Seo et al. 2025): large batches, a few gradient
updates per vectorized env step, n-step returns, observation normalization and optional asymmetric critic
observations. Notation below: ``s`` observation, ``a`` action in ``[-1, 1]``, ``u`` pre-squash Gaussian sample,
``a = tanh(u)``, ``Q_1, Q_2`` twin critics, ``Q̄_j`` their Polyak-averaged targets, ``α`` the temperature.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.distributions import LOG_SQRT_2PI, log_one_minus_tanh_sq
from rslkit.models.mlp import ACTIVATIONS, make_mlp
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.models.obs_groups import resolve_obs_groups


@dataclass
class SACCfg:
    """SAC hyperparameters. CLI: ``--agent.algorithm.<field>``."""

    gamma: float = 0.99
    tau: float = 0.005
    """Polyak factor: ``θ̄ <- τ θ + (1 - τ) θ̄`` after every critic update."""
    n_step: int = 1
    """Steps of the n-step return (cut at episode ends)."""
    batch_size: int = 4096
    utd_ratio: float = 1.0
    """Gradient updates per vectorized env step (each step adds ``num_envs`` transitions); may be fractional."""
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    init_alpha: float = 1.0
    auto_alpha: bool = True
    """Tune ``α`` so the policy entropy tracks ``target_entropy``."""
    target_entropy: float | None = None
    """Default ``-|A|`` (Haarnoja et al. 2018b)."""
    policy_delay: int = 1
    """Critic updates per actor (and temperature) update."""
    max_grad_norm: float = 0.0
    """Clip gradient norms of each network to this value (0: no clipping)."""


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


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``θ̄ <- τ θ + (1 - τ) θ̄`` for every parameter; buffers (e.g. none in MLPs) are copied."""
    t_params: list[torch.Tensor] = list(target.parameters())
    s_params: list[torch.Tensor] = list(source.parameters())
    torch._foreach_lerp_(t_params, s_params, tau)
    for tb, sb in zip(target.buffers(), source.buffers()):
        tb.copy_(sb)


class SAC:
    """Soft actor-critic losses and optimizers over a :class:`SACModel`; the runner owns data and loop.

    Args:
        model: networks (moved to ``device``).
        cfg: hyperparameters.
        num_actions: ``|A|``, for the default target entropy ``-|A|``.
        device: training device.
    """

    def __init__(self, model: SACModel, cfg: SACCfg, num_actions: int, device: str | torch.device) -> None:
        if cfg.n_step < 1 or cfg.batch_size < 1 or cfg.policy_delay < 1:
            raise ValueError("agent.algorithm.n_step, batch_size and policy_delay must be >= 1.")
        if cfg.utd_ratio <= 0 or not 0 < cfg.tau <= 1 or cfg.init_alpha <= 0:
            raise ValueError("agent.algorithm.utd_ratio and init_alpha must be > 0 and tau in (0, 1].")
        self.cfg = cfg
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.target_entropy = float(-num_actions if cfg.target_entropy is None else cfg.target_entropy)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=self.device, requires_grad=True)
        fused = self.device.type in ("cpu", "cuda")  # one kernel per step instead of one per parameter
        self.actor_optimizer = torch.optim.Adam(self.model.actor.parameters(), lr=cfg.actor_lr, fused=fused)
        self.critic_optimizer = torch.optim.Adam(self.model.critic.parameters(), lr=cfg.critic_lr, fused=fused)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr, fused=fused)
        self.num_updates = 0
        """Critic updates done so far (drives the policy delay)."""
        self._update_credit = 0.0
        """Fractional updates owed by the UTD ratio, carried between env steps."""

    @property
    def alpha(self) -> torch.Tensor:
        """Temperature ``α = exp(log α)`` (detached)."""
        return self.log_alpha.detach().exp()

    def updates_due(self) -> int:
        """Gradient updates owed for one more vectorized env step under the UTD ratio."""
        self._update_credit += self.cfg.utd_ratio
        n = int(self._update_credit + 1e-9)
        self._update_credit -= n
        return n

    # ------------------------------------------------------------------ losses
    def critic_loss(self, batch: TensorDict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Soft Bellman residual with n-step returns and clipped double Q.

        ``y = R^(n) + γ^K (1 - d) [ min_j Q̄_j(s', a') - α log π(a'|s') ],  a' ~ π(·|s')``
        ``L_Q = E[ Σ_j w (Q_j(s, a) - y)^2 ]``

        where ``R^(n)`` and ``γ^K (1 - d)`` come from the replay buffer (``reward`` and ``discount``) and ``w``
        masks transitions without a valid next observation.
        """
        m = self.model
        with torch.no_grad():
            next_action, next_log_prob = m.actor.sample(m.actor_input(batch["next_obs"]))
            q1_next, q2_next = m.critic_target(m.critic_input(batch["next_obs"]), next_action)
            soft_v_next = torch.min(q1_next, q2_next) - self.alpha * next_log_prob
            y = batch["reward"] + batch["discount"] * soft_v_next
        q1, q2 = m.critic(m.critic_input(batch["obs"]), batch["action"])
        w = batch["weight"]
        denom = w.sum().clamp_min(1.0)
        loss = ((w * (q1 - y) ** 2).sum() + (w * (q2 - y) ** 2).sum()) / denom
        return loss, {"q": ((q1 + q2) * 0.5 * w).sum().detach() / denom, "target": (y * w).sum() / denom}

    def actor_loss(self, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """``L_π = E_s[ α log π(ã|s) - min_j Q_j(s, ã) ],  ã ~ π(·|s)`` (reparameterized).

        Returns:
            ``(loss, log π(ã|s) [B] detached)``.
        """
        m = self.model
        action, log_prob = m.actor.sample(m.actor_input(batch["obs"]))
        q1, q2 = m.critic(m.critic_input(batch["obs"]), action)
        loss = (self.alpha * log_prob - torch.min(q1, q2)).mean()
        return loss, log_prob.detach()

    def alpha_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """``L_α = E[ -log α (log π(ã|s) + H̄) ]`` with target entropy ``H̄``: raises ``α`` while the entropy
        ``-E[log π]`` is below ``H̄`` and lowers it above (optimized in ``log α`` so that ``α > 0``)."""
        return -(self.log_alpha * (log_prob + self.target_entropy)).mean()

    # ------------------------------------------------------------------ update
    def update(self, batch: TensorDict) -> dict[str, torch.Tensor]:
        """One critic step, Polyak update of the targets, and every ``policy_delay`` steps an actor and temperature
        step. Returns detached scalars (no host sync)."""
        c, m = self.cfg, self.model
        loss_q, info = self.critic_loss(batch)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss_q.backward()
        if c.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(m.critic.parameters(), c.max_grad_norm)
        self.critic_optimizer.step()
        polyak_update(m.critic_target, m.critic, c.tau)
        self.num_updates += 1
        out = {"value": loss_q.detach(), "q": info["q"], "target_q": info["target"]}
        if self.num_updates % c.policy_delay == 0:
            m.critic.requires_grad_(False)  # the actor loss differentiates through Q only w.r.t. the action
            loss_pi, log_prob = self.actor_loss(batch)
            self.actor_optimizer.zero_grad(set_to_none=True)
            loss_pi.backward()
            if c.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(m.actor.parameters(), c.max_grad_norm)
            self.actor_optimizer.step()
            m.critic.requires_grad_(True)
            out["actor"] = loss_pi.detach()
            out["entropy"] = -log_prob.mean()
            if c.auto_alpha:
                loss_alpha = self.alpha_loss(log_prob)
                self.alpha_optimizer.zero_grad(set_to_none=True)
                loss_alpha.backward()
                self.alpha_optimizer.step()
                out["alpha_loss"] = loss_alpha.detach()
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Networks (with normalizers and targets), optimizers, temperature and update counters."""
        return {
            "model": self.model.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "num_updates": self.num_updates,
            "update_credit": self._update_credit,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.model.load_state_dict(state["model"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.num_updates = state["num_updates"]
        self._update_credit = state["update_credit"]
