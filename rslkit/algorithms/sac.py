"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") for massively parallel envs.

Built for thousands of envs in the spirit of FastTD3 / FastSAC (Seo et al. 2025): large batches, a few gradient
updates per vectorized env step, n-step returns, observation normalization and optional asymmetric critic
observations. With ``E > 2`` critics and demonstrations in the replay buffer it is RLPD (Ball et al. 2023): a critic
ensemble whose target takes the min over a random subset (REDQ, Chen et al. 2021), symmetric sampling of online and
offline data; :meth:`SAC.bc_update` gives the behaviour-cloning warm start of HIL-SERL (Luo et al. 2024).
Notation below: ``s`` observation, ``a`` action in ``[-1, 1]``, ``u`` pre-squash Gaussian sample, ``a = tanh(u)``,
``Q_1 .. Q_E`` critics (``E = 2``: SAC's twin critics), ``Q̄_j`` their Polyak-averaged targets, ``α`` the temperature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.sac_networks import SACModel, SACNetworkCfg, squashed_gaussian_log_prob
from rslkit.utils.validation import expect, finite

BC_ACTION_LIMIT = 1.0 - 1e-6
"""Demonstration actions are clipped to ``±BC_ACTION_LIMIT`` before ``atanh`` (``±1`` has no pre-image)."""

__all__ = ["SAC", "SACCfg", "SACModel", "SACNetworkCfg", "polyak_update", "squashed_gaussian_log_prob"]


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
    critic_subset: int = 2
    """Target critics the Bellman target takes the min over, drawn at random per update (REDQ's ``M``); in
    ``[2, policy.num_critics]``. With as many as there are critics, the min is over all (SAC's clipped double Q)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field SAC cannot run with."""
        expect(finite(self.gamma) and 0 < self.gamma <= 1, "gamma", f"must be in (0, 1], got {self.gamma}")
        expect(finite(self.tau) and 0 < self.tau <= 1, "tau", f"must be in (0, 1], got {self.tau}")
        k = self.critic_subset
        expect(isinstance(k, int) and k >= 2, "critic_subset", f"must be an integer >= 2, got {k}")
        for name in ("n_step", "batch_size", "policy_delay"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        for name in ("utd_ratio", "actor_lr", "critic_lr", "alpha_lr", "init_alpha"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        target = self.target_entropy
        expect(target is None or finite(target), "target_entropy", f"must be None (-|A|) or finite, got {target}")
        expect(
            finite(self.max_grad_norm) and self.max_grad_norm >= 0,
            "max_grad_norm",
            f"must be >= 0 (0: no clipping), got {self.max_grad_norm}",
        )


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
        if not 2 <= cfg.critic_subset <= model.num_critics:
            raise ValueError(
                f"agent.algorithm.critic_subset is {cfg.critic_subset} but must be in [2, {model.num_critics}] "
                "(agent.policy.num_critics); raise num_critics or lower critic_subset."
            )
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
        """Soft Bellman residual with n-step returns and a min over (a random subset ``M`` of) the target critics.

        ``y = R^(n) + γ^K (1 - d) [ min_{j ∈ M} Q̄_j(s', a') - α log π(a'|s') ],  a' ~ π(·|s')``
        ``L_Q = E[ Σ_{j=1..E} w (Q_j(s, a) - y)^2 ]``

        where ``R^(n)`` and ``γ^K (1 - d)`` come from the replay buffer (``reward`` and ``discount``), ``w`` masks
        transitions without a valid next observation, and ``M`` has ``critic_subset`` of the ``E`` critics (all of
        them by default: SAC's clipped double Q for ``E = 2``).
        """
        m = self.model
        with torch.no_grad():
            next_action, next_log_prob = m.actor.sample(m.actor_input(batch["next_obs"]))
            q_next = m.critic_target(m.critic_input(batch["next_obs"]), next_action)  # [E, B]
            soft_v_next = self.subset_min(q_next) - self.alpha * next_log_prob
            y = batch["reward"] + batch["discount"] * soft_v_next
        q = m.critic(m.critic_input(batch["obs"]), batch["action"])  # [E, B]
        w = batch["weight"]
        denom = w.sum().clamp_min(1.0)
        loss = (w * (q - y) ** 2).sum(-1).sum() / denom
        return loss, {"q": (q.mean(0) * w).sum().detach() / denom, "target": (y * w).sum() / denom}

    def subset_min(self, q: torch.Tensor) -> torch.Tensor:
        """``min_{j ∈ M} Q_j`` ``[B]`` of ``q [E, B]``, ``M`` a random ``critic_subset`` of the ``E`` rows (one draw
        per call, as REDQ draws one per update); no random draw when the subset is all of them."""
        k = self.cfg.critic_subset
        if k < q.shape[0]:
            q = q[torch.randperm(q.shape[0], device=q.device)[:k]]
        return q.amin(0)

    def actor_loss(self, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """``L_π = E_s[ α log π(ã|s) - Q(s, ã) ],  ã ~ π(·|s)`` (reparameterized), with
        ``Q = min(Q_1, Q_2)`` for twin critics (SAC) and the ensemble mean ``Q = 1/E Σ_j Q_j`` for ``E > 2`` (RLPD).

        Returns:
            ``(loss, log π(ã|s) [B] detached)``.
        """
        m = self.model
        action, log_prob = m.actor.sample(m.actor_input(batch["obs"]))
        q = m.critic(m.critic_input(batch["obs"]), action)  # [E, B]
        q_pi = q.amin(0) if q.shape[0] == 2 else q.mean(0)
        loss = (self.alpha * log_prob - q_pi).mean()
        return loss, log_prob.detach()

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Behaviour cloning: ``L_BC = -E_(s,a)~D[ log π(a|s) ]``, the exact log-likelihood of the squashed Gaussian
        at ``u = atanh(a)``, actions clipped to ``±(1 - 1e-6)`` first.

        Args:
            batch: ``obs`` and ``action [B, A]`` in ``[-1, 1]`` (e.g. demonstrations from the replay buffer).
        """
        m = self.model
        mean, log_std = m.actor(m.actor_input(batch["obs"]))
        u = torch.atanh(batch["action"].clamp(-BC_ACTION_LIMIT, BC_ACTION_LIMIT))
        return -squashed_gaussian_log_prob(mean, log_std, u).mean()

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

    def bc_update(self, batch: TensorDict) -> dict[str, torch.Tensor]:
        """One actor optimizer step on :meth:`bc_loss` (a warm start before RL); critics and ``α`` are left alone.

        Returns:
            ``{"bc": loss}`` detached (no host sync).
        """
        loss = self.bc_loss(batch)
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.model.actor.parameters(), self.cfg.max_grad_norm)
        self.actor_optimizer.step()
        return {"bc": loss.detach()}

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
