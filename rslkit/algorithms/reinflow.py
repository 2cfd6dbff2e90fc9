"""ReinFlow (Zhang et al. 2025, arXiv 2505.22094): PPO over the noisy Euler chain of a flow policy.

A learnable, bounded noise net makes every Euler step Gaussian, so the chain ``a_0 -> ... -> a_K`` has an exact
likelihood (:class:`~rslkit.models.flow.NoisyFlowChain`). PPO then optimizes

    L = -E[min(r A, clip(r, 1 - eps, 1 + eps) A)] - beta_H H + beta_W2 |a_K(theta) - a_K(theta_pre)|^2,
    r = exp(log pi_bar_theta(chain | o) - log pi_bar_old(chain | o)),

with ``log pi_bar`` the log-likelihood normalized per dimension and step, ``H`` the (normalized) entropy of the
Gaussian steps, and the optional W2 term pulling the deterministic actions towards the pretrained policy's from
the same initial noise. Advantages come from GAE over decisions (action chunks) with discount ``gamma^Ta``; the
critic is trained alone for the first ``critic_warmup_iterations``.

With ``noise_method = flow_sde`` (pi_RL's Flow-SDE, :class:`~rslkit.models.flow.FlowSDEChain`) the same loss runs on
the chain with one random stochastic step ``j``: ``log pi_bar = log N(a_{j+1}; mu_j(a_j, o), D sigma_{t_j}^2) / (Ta A)``
with the ODE -> SDE mean ``mu_j`` and ``sigma_t = a sqrt(t / (1 - t))`` (pi_RL's time, ``t = 1`` noise); its std is
fixed by the time, so ``H`` is a constant there and ``beta_H`` has no effect.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.algorithms.gae import bootstrap_time_outs, compute_gae, normalize_advantages
from rslkit.algorithms.ppo_losses import clip_fraction, value_loss
from rslkit.algorithms.staleness import StalenessCfg, policy_loss
from rslkit.models.flow.chain import FlowChain
from rslkit.models.flow.noise_net import BoundedNoiseNet
from rslkit.models.flow.noisy_chain import NoisyFlowChain
from rslkit.models.flow.policy import FlowPolicy
from rslkit.models.flow.sde_chain import FlowSDEChain
from rslkit.models.mlp import make_mlp
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.models.vla.policy import VLAPolicy
from rslkit.storage.rollout_storage import MiniBatch, RolloutStorage
from rslkit.utils.validation import expect, finite


@dataclass
class ReinFlowCfg:
    """ReinFlow settings (defaults: the paper's locomotion values where they apply). CLI: ``--agent.algorithm.*``."""

    num_inference_steps: int = 0
    """``K`` of the chain and of deployment; 0 keeps the pretrained policy's ``num_inference_steps``."""
    noise_method: Literal["flow_noise", "flow_sde"] = "flow_noise"
    """How the chain explores (pi_RL's names): ``flow_noise`` makes every Euler step Gaussian with the std of
    ``noise`` (ReinFlow; :class:`~rslkit.models.flow.NoisyFlowChain`), ``flow_sde`` makes one random step Gaussian
    by the ODE -> SDE conversion with ``noise_level`` (:class:`~rslkit.models.flow.FlowSDEChain`)."""
    noise: Literal["learned", "fixed"] = "learned"
    """Flow-Noise's std: ``learned``: ReinFlow's noise net; ``fixed``: constant ``sigma_max`` at every step
    (DPPO-style baseline)."""
    noise_level: float = 0.5
    """Flow-SDE's ``a`` in ``sigma_t = a sqrt(t / (1 - t))`` (pi_RL: 0.5)."""
    sigma_min: float = 0.10
    sigma_max: float = 0.24
    noise_hidden_dims: tuple[int, ...] = (64, 64)
    critic_hidden_dims: tuple[int, ...] = (256, 256, 256)
    gamma: float = 0.99
    """Per env step; a decision of ``Ta`` steps is discounted by ``gamma^Ta``."""
    lam: float = 0.95
    clip_param: float = 0.01
    """PPO clip range of the per-dimension, per-step normalized ratio."""
    actor_lr: float = 4.5e-5
    critic_lr: float = 6.5e-4
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    entropy_coef: float = 0.03
    w2_coef: float = 0.0
    """Weight of ``|a_K(theta) - a_K(theta_pretrained)|^2`` from the same noise (0: off)."""
    critic_warmup_iterations: int = 2
    """Iterations that train only the critic (the actor stays at the pretrained policy)."""
    max_grad_norm: float = 1.0
    target_kl: float = 0.0
    """Stop the epochs of an iteration once the approximate KL of the normalized ratio exceeds this (0: never)."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before GAE (keeps value targets O(1))."""
    staleness: StalenessCfg = field(default_factory=StalenessCfg)
    """How decisions of older policy versions are treated (decoupled PPO, A-3PO, M2PO); default: plain PPO."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field ReinFlow cannot run with."""
        k = self.num_inference_steps
        expect(isinstance(k, int) and k >= 0, "num_inference_steps", f"must be >= 0 (0: the policy's), got {k}")
        method = self.noise_method
        expect(method in ("flow_noise", "flow_sde"), "noise_method",
               f"must be 'flow_noise' (ReinFlow) or 'flow_sde' (pi_RL), got {method!r}")  # fmt: skip
        level = self.noise_level
        expect(finite(level) and level > 0, "noise_level", f"must be a finite number > 0 (pi_RL: 0.5), got {level}")
        expect(self.noise in ("learned", "fixed"), "noise", f"must be 'learned' or 'fixed', got {self.noise!r}")
        lo, hi = self.sigma_min, self.sigma_max
        expect(finite(hi) and hi > 0, "sigma_max", f"must be a finite number > 0, got {hi}")
        if self.noise == "learned":
            expect(finite(lo) and 0 < lo <= hi, "sigma_min", f"must be in (0, sigma_max = {hi}], got {lo}")
        for name in ("noise_hidden_dims", "critic_hidden_dims"):
            dims = tuple(getattr(self, name))
            expect(all(isinstance(d, int) and d >= 1 for d in dims), name, f"must all be integers >= 1, got {dims}")
        expect(finite(self.gamma) and 0 < self.gamma <= 1, "gamma", f"must be in (0, 1], got {self.gamma}")
        expect(finite(self.lam) and 0 <= self.lam <= 1, "lam", f"must be in [0, 1], got {self.lam}")
        for name in ("clip_param", "actor_lr", "critic_lr", "max_grad_norm", "reward_scale"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        for name in ("entropy_coef", "w2_coef", "target_kl"):
            value = getattr(self, name)
            expect(finite(value) and value >= 0, name, f"must be a finite number >= 0, got {value}")
        for name in ("num_learning_epochs", "num_mini_batches"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        warmup = self.critic_warmup_iterations
        expect(isinstance(warmup, int) and warmup >= 0, "critic_warmup_iterations", f"must be >= 0, got {warmup}")


def make_chain(policy: FlowPolicy | VLAPolicy, cfg: ReinFlowCfg) -> FlowChain:
    """The stochastic chain (actor) around ``policy``: Flow-SDE (``noise_method = flow_sde``), or Flow-Noise with a
    bounded noise net or fixed noise for the DPPO-style baseline.

    The noise net reads the chain sample, the flow time and the policy's noise features (the normalized observation
    of a flow policy, the pooled observation tokens of a VLA policy)."""
    k = cfg.num_inference_steps or policy.cfg.num_inference_steps
    if cfg.noise_method == "flow_sde":
        return FlowSDEChain(policy, k, cfg.noise_level)
    if cfg.noise_method != "flow_noise":
        raise ValueError(f"Unknown noise_method '{cfg.noise_method}'; use 'flow_noise' or 'flow_sde'.")
    if cfg.noise == "fixed":
        return NoisyFlowChain(policy, k, fixed_sigma=cfg.sigma_max)
    if cfg.noise != "learned":
        raise ValueError(f"Unknown noise '{cfg.noise}'; use 'learned' (ReinFlow) or 'fixed'.")
    noise = BoundedNoiseNet(
        policy.noise_feature_dim, policy.horizon, policy.action_dim, cfg.sigma_min, cfg.sigma_max, cfg.noise_hidden_dims
    )
    return NoisyFlowChain(policy, k, noise_net=noise)


class ReinFlow:
    """PPO on a stochastic chain (:class:`~rslkit.models.flow.NoisyFlowChain`: Flow-Noise, or
    :class:`~rslkit.models.flow.FlowSDEChain`: Flow-SDE) with a separate critic ``V(o)``.

    Args:
        chain: the actor (its policy holds the pretrained weights and normalizers).
        cfg: settings.
        num_steps: decisions per env and iteration (rollout length).
        obs: an observation batch ``[N]`` of the env (for storage shapes).
        obs_group: the group the actor reads (and the critic, without ``critic_group``).
        device: training device.
        critic_group: an asymmetric critic's group (privileged state), normalized by a running mean and std of its
            own (:class:`~rslkit.models.normalizer.EmpiricalNormalization`); None: the critic reads the actor's
            normalized ``obs_group`` (ReinFlow's).
        actor_groups: the groups the actor's inputs are built from, kept in the rollout (default: ``obs_group``).
    """

    def __init__(
        self,
        chain: FlowChain,
        cfg: ReinFlowCfg,
        num_steps: int,
        obs: TensorDict,
        obs_group: str,
        device: torch.device | str = "cpu",
        critic_group: str | None = None,
        actor_groups: Sequence[str] | None = None,
    ) -> None:
        if cfg.num_mini_batches < 1 or cfg.num_learning_epochs < 1:
            raise ValueError("num_mini_batches and num_learning_epochs must be >= 1.")
        if cfg.clip_param <= 0:
            raise ValueError(f"clip_param must be > 0, got {cfg.clip_param}.")
        self.cfg = cfg
        self.device = torch.device(device)
        self.chain = chain.to(self.device)
        self.obs_group = obs_group
        reference = copy.deepcopy(chain.policy)
        assert isinstance(reference, nn.Module)
        self.reference = reference.eval().requires_grad_(False)
        """The pretrained policy (W2 regularization target)."""
        self.critic_group = critic_group
        self.critic_normalizer: EmpiricalNormalization | None = None
        """Running statistics of ``critic_group`` (updated with every decision's observation); None without one."""
        if critic_group is None:
            self.critic: nn.Module = make_mlp(chain.policy.obs_dim, cfg.critic_hidden_dims, 1, "elu").to(self.device)
        else:
            if critic_group not in obs.keys():
                raise ValueError(
                    f"The critic reads the observation group '{critic_group}', which the env lacks (have "
                    f"{sorted(obs.keys())}); set the critic's group to one of them."
                )
            dim = int(obs[critic_group].shape[-1])
            self.critic_normalizer = EmpiricalNormalization(dim, clip=5.0)
            mlp = make_mlp(dim, cfg.critic_hidden_dims, 1, "elu")
            self.critic = nn.Sequential(self.critic_normalizer, mlp).to(self.device)
        # weights the caller froze (requires_grad False: a VLA's tokenizer with trainable=action_expert) stay out
        self.actor_optimizer = torch.optim.Adam([p for p in self.chain.parameters() if p.requires_grad], cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        groups = list(dict.fromkeys([*(actor_groups or [obs_group]), *([critic_group] if critic_group else [])]))
        self.storage = RolloutStorage(num_steps, obs, chain.chain_dim, 0, self.device, groups)
        """Decisions with the chain's flattened record as their action."""
        self._pending: tuple | None = None
        self.chunk_gamma = cfg.gamma**chain.horizon
        self.version = 0
        """Policy version: the number of actor updates made. Decisions record the version that acted."""

    # ------------------------------------------------------------------ helpers
    def normalized_obs(self, obs: TensorDict) -> Any:
        """The actor's inputs: ``[B, D]`` min-max normalized ``obs_group`` (the critic's too, without
        ``critic_group``)."""
        return self.chain.policy.obs_normalizer(obs[self.obs_group])

    def critic_input(self, obs: TensorDict, obs_n: Any = None) -> torch.Tensor:
        """``[B, D_c]``: the raw ``critic_group`` (the critic normalizes it), or the actor's normalized input
        (``obs_n`` when already computed)."""
        if self.critic_group is not None:
            return obs[self.critic_group].float()
        return self.normalized_obs(obs) if obs_n is None else obs_n

    def value(self, obs: TensorDict) -> torch.Tensor:
        """Critic ``V(o) [B]``."""
        return self.critic(self.critic_input(obs)).squeeze(-1)

    def to_env(self, a_k: torch.Tensor) -> torch.Tensor:
        """Env-unit chunk from the chain's final sample: clip to the data range ``[-1, 1]``, unnormalize."""
        return self.chain.policy.action_normalizer.unnormalize(a_k.clamp(-1.0, 1.0))

    # ------------------------------------------------------------------ rollout
    def begin_rollout(self) -> None:
        """Start a rollout: the chain holds no state across decisions (no recurrent memory), so nothing to record."""

    def act(self, obs: TensorDict) -> torch.Tensor:
        """Sample a noisy chain per env; return the env-unit chunk ``[N, Ta, A]`` and remember what PPO needs.

        The stored log-probability is recomputed from the stored chain with :meth:`FlowChain.log_prob` (the
        function and time grid the update uses), so the first ratio is 1.
        """
        obs_n = self.normalized_obs(obs)
        chain = self.chain.sample(obs_n)
        log_prob, _ = self.chain.normalized_log_prob(obs_n, chain)
        if self.critic_normalizer is not None:
            self.critic_normalizer.update(self.critic_input(obs))
        value = self.critic(self.critic_input(obs, obs_n)).squeeze(-1)
        self._pending = (obs, chain, log_prob, value)
        return self.to_env(self.chain.final_sample(chain))

    def process_env_step(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        """Store a decision; time-outs are bootstrapped with ``R += gamma^n V(o_t)`` (``gamma^n`` = the wrapper's
        ``extras["discount"]``)."""
        if self._pending is None:
            raise RuntimeError("process_env_step called before act().")
        obs, chain, log_prob, value = self._pending
        rewards = rewards.to(self.device, torch.float32) * self.cfg.reward_scale
        time_outs = extras.get("time_outs")
        if time_outs is not None:
            discount = extras.get("discount", torch.full_like(rewards, self.chunk_gamma)).to(self.device)
            rewards = bootstrap_time_outs(rewards, value, time_outs, discount)
        self.storage.add(
            obs, chain.flatten(1), log_prob, value, rewards, dones.to(self.device).bool(), (), self.version
        )
        self._pending = None

    def compute_returns(self, last_obs: TensorDict) -> None:
        """GAE over decisions with ``gamma^Ta``; advantages normalized over the rollout."""
        st = self.storage
        st.advantages, st.returns = compute_gae(
            st.rewards, st.values, st.dones, self.value(last_obs), self.chunk_gamma, self.cfg.lam
        )
        st.advantages = normalize_advantages(st.advantages)

    # ------------------------------------------------------------------ update
    def update(self, update_actor: bool = True) -> dict[str, float]:
        """PPO epochs over the rollout (only the critic when ``update_actor`` is False).

        Returns:
            Means of the losses, entropy, KL, clip fraction, sigma, the number of mini-batches run, the first
            mini-batch's mean ratio and largest ``|ratio - 1|`` (0 by construction with fresh data or the decoupled
            objective), and the decisions' staleness (versions behind the pre-update policy, mean and max).
        """
        c = self.cfg
        staleness = (self.version - self.storage.versions).float()
        if c.staleness.needs_proximal and c.staleness.proximal == "recompute":  # the critic-only loss logs it too
            self.storage.proximal_log_probs = self._proximal_log_probs()
        sums: dict[str, float] = {}
        first: dict[str, float] = {}
        n = 0
        stop = False
        for _ in range(c.num_learning_epochs):
            for batch in self.storage.mini_batches(c.num_mini_batches, 1):
                stats = self._update_mini_batch(batch, update_actor)
                if not first:
                    first = {"first_ratio": stats["ratio_mean"], "first_ratio_max_dev": stats["ratio_max_dev"]}
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value
                n += 1
                if update_actor and c.target_kl > 0 and stats["kl"] > c.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.storage.clear()
        out = {k: v / n for k, v in sums.items()}
        out.update(first)
        out["mini_batches"] = float(n)
        out["staleness_mean"], out["staleness_max"] = float(staleness.mean()), float(staleness.max())
        if update_actor:
            self.version += 1
        return out

    @torch.no_grad()
    def _proximal_log_probs(self) -> torch.Tensor:
        """``log pi_prox [T, N]``: the stored chains' normalized log-likelihoods under the pre-update chain."""
        st = self.storage
        obs_n = self.normalized_obs(st.obs.flatten(0, 1))
        chains = self.chain.unflatten(st.actions.flatten(0, 1))
        b = chains.shape[0]
        out = torch.cat(
            [self.chain.normalized_log_prob(obs_n[i : i + 65536], chains[i : i + 65536])[0] for i in range(0, b, 65536)]
        )
        return out.view(st.num_steps, st.num_envs)

    def _update_mini_batch(self, batch: MiniBatch, update_actor: bool) -> dict[str, float]:
        c = self.cfg
        obs_n = self.normalized_obs(batch.obs)
        chain = self.chain.unflatten(batch.actions)
        # Critic: L^VF = E[(V(o) - R)^2], its own optimizer step.
        critic_loss = value_loss(self.critic(self.critic_input(batch.obs, obs_n)).squeeze(-1), batch.returns)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), c.max_grad_norm)
        self.critic_optimizer.step()
        # Actor: L = -L^CLIP(r) - beta_H H + beta_W2 W2, r the ratio of the normalized chain likelihoods (or the
        # decoupled -L^dec with u = pi_theta / pi_prox, rslkit.algorithms.staleness).
        log_prob, entropy = self.chain.normalized_log_prob(obs_n, chain)
        surrogate, ratio, stale_stats = policy_loss(
            c.staleness, log_prob, batch.log_probs, batch.advantages, c.clip_param,
            batch.proximal_log_probs, batch.versions, self.version,
        )  # fmt: skip
        log_ratio = torch.log(ratio)
        entropy_mean = entropy.mean()  # H
        loss = surrogate - c.entropy_coef * entropy_mean
        w2 = torch.zeros((), device=self.device)
        if c.w2_coef > 0:
            x0 = self.chain.initial_noise(chain)
            with torch.no_grad():
                target = self.reference.sample_normalized(obs_n, x0, self.chain.num_steps)
            w2 = ((self.chain.deterministic_actions(obs_n, x0) - target) ** 2).mean()
            loss = loss + c.w2_coef * w2
        if update_actor:
            self.actor_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.chain.parameters(), c.max_grad_norm)
            self.actor_optimizer.step()
        with torch.no_grad():
            return {
                "surrogate": float(surrogate),
                "value": float(critic_loss),
                "entropy": float(entropy_mean),
                "w2": float(w2),
                "kl": float(((ratio - 1) - log_ratio).mean()),  # k3 estimator of KL(old || new), >= 0
                "clip_fraction": float(clip_fraction(ratio, c.clip_param)),
                "ratio_mean": float(ratio.mean()),
                "ratio_max_dev": float((ratio - 1).abs().max()),
                **{k: float(v) for k, v in stale_stats.items() if k != "kl_prox"},
            }

    @torch.no_grad()
    def mean_sigma(self, obs: TensorDict) -> float:
        """Mean noise std of the chain's steps at ``obs`` (logging)."""
        return self.chain.mean_std(self.normalized_obs(obs))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Actor chain, critic, pretrained reference and both optimizers."""
        return {
            "chain": self.chain.state_dict(),
            "critic": self.critic.state_dict(),
            "reference": self.reference.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.chain.load_state_dict(state["chain"])
        self.critic.load_state_dict(state["critic"])
        self.reference.load_state_dict(state["reference"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.version = int(state.get("version", 0))  # checkpoints before policy versions start at 0
