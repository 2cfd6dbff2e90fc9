"""Actor-critic over observation groups: per-group normalization, MLP or recurrent trunks, any action distribution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.distributions import DISTRIBUTIONS, make_distribution
from rslkit.models.mlp import check_actor_critic_mlps, make_mlp
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.models.obs_groups import resolve_obs_groups
from rslkit.models.recurrent import Hidden, Memory, mask_hidden
from rslkit.utils.validation import expect, finite


@dataclass
class PolicyCfg:
    """Actor-critic architecture."""

    actor_hidden_dims: tuple[int, ...] = (256, 256, 256)
    critic_hidden_dims: tuple[int, ...] = (256, 256, 256)
    activation: str = "elu"
    distribution: Literal["gaussian", "tanh_gaussian", "beta", "categorical"] = "gaussian"
    """``tanh_gaussian`` and ``beta`` give bounded actions in [-1, 1]; ``categorical`` needs a Discrete env."""
    state_dependent_std: bool = False
    """Gaussian std from the network (True) or a learned vector (False)."""
    init_std: float = 1.0
    min_std: float = 1e-3
    max_std: float = 10.0
    obs_normalization: bool = True
    """Empirical normalization per observation group (updated after each PPO update)."""
    actor_obs_groups: tuple[str, ...] = ("policy",)
    critic_obs_groups: tuple[str, ...] = ()
    """Empty: the env's ``critic`` group if it has one (asymmetric actor-critic), else the actor's groups."""
    rnn_type: Literal["none", "gru", "lstm"] = "none"
    rnn_hidden_dim: int = 256
    rnn_num_layers: int = 1

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for an architecture that cannot be built."""
        check_actor_critic_mlps(self)
        dist = self.distribution
        expect(dist in DISTRIBUTIONS, "distribution", f"is unknown ({dist!r}); use one of {', '.join(DISTRIBUTIONS)}")
        if dist in ("gaussian", "tanh_gaussian"):
            lo, std, hi = self.min_std, self.init_std, self.max_std
            expect(finite(lo) and lo > 0, "min_std", f"must be a finite number > 0, got {lo}")
            expect(finite(std) and lo <= std, "init_std", f"must be in [min_std, max_std] = [{lo}, {hi}], got {std}")
            expect(finite(hi) and std <= hi, "max_std", f"must be finite and >= init_std ({std}), got {hi}")
        rnn = self.rnn_type
        expect(rnn in ("none", "gru", "lstm"), "rnn_type", f"must be 'none', 'gru' or 'lstm', got {rnn!r}")
        if rnn != "none":
            for name in ("rnn_hidden_dim", "rnn_num_layers"):
                value = getattr(self, name)
                expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")


class ActorCritic(nn.Module):
    """Actor and critic networks with their own trunks; observation groups normalized once, shared by both.

    Rollout: :meth:`act` (samples raw actions, advances hidden states). Update: :meth:`evaluate`.
    Deployment: :meth:`act_inference` (deterministic env actions).
    """

    def __init__(self, obs: TensorDict, num_actions: int, cfg: PolicyCfg, num_choices: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.obs_groups = resolve_obs_groups(obs, cfg.actor_obs_groups, cfg.critic_obs_groups)
        used = list(dict.fromkeys(self.obs_groups["actor"] + self.obs_groups["critic"]))
        dims = {g: obs[g].shape[-1] for g in used}
        self.normalizers = nn.ModuleDict(
            {g: EmpiricalNormalization(dims[g]) if cfg.obs_normalization else nn.Identity() for g in used}
        )
        self.dist = make_distribution(
            cfg.distribution, num_actions, num_choices, cfg.init_std, cfg.state_dependent_std, cfg.min_std, cfg.max_std
        )
        actor_in = sum(dims[g] for g in self.obs_groups["actor"])
        critic_in = sum(dims[g] for g in self.obs_groups["critic"])
        self.is_recurrent = cfg.rnn_type != "none"
        self.actor_memory: Memory | None = None
        self.critic_memory: Memory | None = None
        if self.is_recurrent:
            self.actor_memory = Memory(actor_in, cfg.rnn_type, cfg.rnn_hidden_dim, cfg.rnn_num_layers)
            self.critic_memory = Memory(critic_in, cfg.rnn_type, cfg.rnn_hidden_dim, cfg.rnn_num_layers)
            actor_in = critic_in = cfg.rnn_hidden_dim
        self.actor = make_mlp(actor_in, cfg.actor_hidden_dims, self.dist.head_dim, cfg.activation)
        self.critic = make_mlp(critic_in, cfg.critic_hidden_dims, 1, cfg.activation)
        # Small last actor layer: initial actions near zero mean, so exploration starts from init_std.
        last = self.actor[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        self.actor_hidden: Hidden | None = None
        self.critic_hidden: Hidden | None = None

    # ------------------------------------------------------------------ inputs
    def _inputs(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        norm = {g: self.normalizers[g](obs[g]) for g in self.normalizers}
        actor_groups, critic_groups = self.obs_groups["actor"], self.obs_groups["critic"]
        actor_x = norm[actor_groups[0]] if len(actor_groups) == 1 else torch.cat([norm[g] for g in actor_groups], -1)
        if critic_groups == actor_groups:
            return actor_x, actor_x
        critic_x = torch.cat([norm[g] for g in critic_groups], -1)
        return actor_x, critic_x

    def ensure_hidden(self, batch: int, device: torch.device) -> None:
        """Create zero hidden states for ``batch`` envs where none exist yet (recurrent policies only)."""
        if self.actor_memory is not None and self.actor_hidden is None:
            self.actor_hidden = self.actor_memory.init_hidden(batch, device)
        if self.critic_memory is not None and self.critic_hidden is None:
            self.critic_hidden = self.critic_memory.init_hidden(batch, device)

    def _actor_step(self, x: torch.Tensor) -> torch.Tensor:
        """Actor trunk input for one step; advances the actor's hidden state."""
        if self.actor_memory is None:
            return x
        self.ensure_hidden(x.shape[0], x.device)
        assert self.actor_hidden is not None
        x, self.actor_hidden = self.actor_memory.step(x, self.actor_hidden)
        return x

    def _critic_step(self, x: torch.Tensor, advance: bool = True) -> torch.Tensor:
        """Critic trunk input for one step; advances the critic's hidden state if ``advance``."""
        if self.critic_memory is None:
            return x
        self.ensure_hidden(x.shape[0], x.device)
        assert self.critic_hidden is not None
        x, hidden = self.critic_memory.step(x, self.critic_hidden)
        if advance:
            self.critic_hidden = hidden
        return x

    # ------------------------------------------------------------------ rollout
    def act(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """Sample raw actions; returns ``(raw [N, R], log_prob [N], value [N], dist params)``."""
        actor_x, critic_x = self._inputs(obs)
        actor_x, critic_x = self._actor_step(actor_x), self._critic_step(critic_x)
        params = self.dist.params(self.actor(actor_x))
        raw = self.dist.sample(params)
        return raw, self.dist.log_prob(params, raw), self.critic(critic_x).squeeze(-1), params

    def value(self, obs: TensorDict) -> torch.Tensor:
        """Critic value ``[N]`` of ``obs`` without advancing the critic's hidden state."""
        _, critic_x = self._inputs(obs)
        return self.critic(self._critic_step(critic_x, advance=False)).squeeze(-1)

    def act_inference(self, obs: TensorDict) -> torch.Tensor:
        """Deterministic env actions ``[N, A]`` (advances the actor's hidden state)."""
        actor_x, _ = self._inputs(obs)
        actor_x = self._actor_step(actor_x)
        return self.dist.to_env(self.dist.mode(self.dist.params(self.actor(actor_x))))

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        """Env actions from raw samples."""
        return self.dist.to_env(raw)

    def reset(self, dones: torch.Tensor | None = None) -> None:
        """Zero the hidden states of finished episodes (all of them when ``dones`` is None)."""
        if not self.is_recurrent:
            return
        if dones is None:
            self.actor_hidden = self.critic_hidden = None
            return
        keep = ~dones.bool()
        if self.actor_hidden is not None:
            self.actor_hidden = mask_hidden(self.actor_hidden, keep)
        if self.critic_hidden is not None:
            self.critic_hidden = mask_hidden(self.critic_hidden, keep)

    def hidden_states(self) -> tuple[Hidden | None, Hidden | None]:
        """Current ``(actor, critic)`` hidden states (for storing at the start of a rollout)."""
        return self.actor_hidden, self.critic_hidden

    # ------------------------------------------------------------------ update
    def evaluate(
        self,
        obs: TensorDict,
        raw: torch.Tensor,
        hidden: tuple[Hidden, Hidden] | None = None,
        resets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """Log-prob, entropy, value and dist params of stored raw actions.

        Feed-forward: ``obs`` batch ``[B]``, ``raw [B, R]``. Recurrent: ``obs`` batch ``[T, B]``, ``raw [T, B, R]``,
        ``hidden`` the states at the rollout start and ``resets [T, B]``; outputs are flattened to ``[T*B]``.
        """
        actor_x, critic_x = self.normalized_inputs(obs)
        actor_h, critic_h = hidden if hidden is not None else (None, None)
        log_prob, entropy, params = self.evaluate_actor(actor_x, raw, actor_h, resets)
        return log_prob, entropy, self.evaluate_critic(critic_x, critic_h, resets), params

    def normalized_inputs(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized actor and critic inputs ``([..., Da], [..., Dc])`` of ``obs`` (the same tensor if the groups
        are the same)."""
        return self._inputs(obs)

    def evaluate_actor(
        self,
        actor_x: torch.Tensor,
        raw: torch.Tensor,
        hidden: Hidden | None = None,
        resets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """Log-prob ``[B]``, entropy ``[B]`` and dist params of ``raw`` under the actor, from normalized inputs
        (see :meth:`evaluate` for the recurrent shapes). Touches only actor parameters."""
        if self.actor_memory is not None:
            if hidden is None or resets is None:
                raise ValueError("A recurrent policy needs the initial hidden states and the resets of the sequence.")
            actor_x = self.actor_memory.sequence(actor_x, hidden, resets).flatten(0, 1)
            raw = raw.flatten(0, 1)
        params = self.dist.params(self.actor(actor_x))
        return self.dist.log_prob(params, raw), self.dist.entropy(params), params

    def evaluate_critic(
        self, critic_x: torch.Tensor, hidden: Hidden | None = None, resets: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Values ``[B]`` from normalized critic inputs (recurrent: ``[T, B, D]`` in, ``[T*B]`` out). Touches only
        critic parameters."""
        if self.critic_memory is not None:
            if hidden is None or resets is None:
                raise ValueError("A recurrent policy needs the initial hidden states and the resets of the sequence.")
            critic_x = self.critic_memory.sequence(critic_x, hidden, resets).flatten(0, 1)
        return self.critic(critic_x).squeeze(-1)

    @torch.no_grad()
    def update_normalization(self, obs: TensorDict) -> None:
        """Fold observations (any batch shape) into each group's running statistics."""
        for g, norm in self.normalizers.items():
            if isinstance(norm, EmpiricalNormalization):
                norm.update(obs[g].reshape(-1, obs[g].shape[-1]))
