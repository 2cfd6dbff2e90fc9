"""Action distributions for policy-gradient methods.

Each distribution turns the actor head output into a tuple of parameters, and works on *raw* samples: the
quantity whose log-probability is exact (pre-squash ``u`` for tanh-Gaussian, ``x in (0, 1)`` for Beta, the
index for categorical). :meth:`ActionDistribution.to_env` maps raw samples to env actions. Rollout storage keeps
raw samples, so PPO recomputes log-probabilities exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Beta, Categorical, kl_divergence

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


class ActionDistribution(nn.Module):
    """Interface: ``head_dim`` outputs of the actor network parameterize the distribution."""

    head_dim: int
    raw_dim: int

    def params(self, head: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Distribution parameters from the head output ``[B, head_dim]``."""
        raise NotImplementedError

    def sample(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Raw samples ``[B, raw_dim]``."""
        raise NotImplementedError

    def mode(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Most likely raw value ``[B, raw_dim]`` (deterministic deployment)."""
        raise NotImplementedError

    def log_prob(self, params: tuple[torch.Tensor, ...], raw: torch.Tensor) -> torch.Tensor:
        """Log-probability ``[B]`` of raw samples."""
        raise NotImplementedError

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Entropy ``[B]`` (a one-sample reparameterized estimate where no closed form exists)."""
        raise NotImplementedError

    def kl(self, old: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """``KL(old || new)`` per sample ``[B]``."""
        raise NotImplementedError

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, A]`` from raw samples."""
        return raw

    def std(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Per-dimension spread of the raw distribution ``[B, raw_dim]`` (for logging)."""
        raise NotImplementedError


class Gaussian(ActionDistribution):
    """Diagonal Gaussian. The std is parameterized by its log and clamped to ``[min_std, max_std]`` so it can never
    become negative or NaN (rsl_rl issues #33, #124); it is either a learned vector (state-independent) or a second
    head output (state-dependent)."""

    def __init__(
        self, num_actions: int, init_std: float, state_dependent: bool, min_std: float, max_std: float
    ) -> None:
        super().__init__()
        if not 0 < min_std <= init_std <= max_std:
            raise ValueError(f"Need 0 < min_std <= init_std <= max_std, got {min_std}, {init_std}, {max_std}.")
        self.state_dependent = state_dependent
        self.raw_dim = num_actions
        self.head_dim = 2 * num_actions if state_dependent else num_actions
        self.log_min, self.log_max = math.log(min_std), math.log(max_std)
        self.init_log_std = math.log(init_std)
        if not state_dependent:
            self.log_std = nn.Parameter(torch.full((num_actions,), self.init_log_std))

    def params(self, head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.state_dependent:
            mean, log_std = head.chunk(2, dim=-1)
            log_std = log_std + self.init_log_std
            return mean, log_std.clamp(self.log_min, self.log_max).exp()
        # Clamp and exponentiate the [A] vector once, then broadcast (no [B, A] work).
        return head, self.log_std.clamp(self.log_min, self.log_max).exp().expand_as(head)

    def sample(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        mean, std = params
        return mean + std * torch.randn_like(mean)

    def rsample(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Reparameterized sample (differentiable in the parameters)."""
        return self.sample(params)

    def mode(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return params[0]

    def log_prob(self, params: tuple[torch.Tensor, ...], raw: torch.Tensor) -> torch.Tensor:
        mean, std = params
        z = (raw - mean) / std
        return (-0.5 * z * z - std.log() - LOG_SQRT_2PI).sum(-1)

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return (0.5 + LOG_SQRT_2PI + params[1].log()).sum(-1)

    def kl(self, old: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...]) -> torch.Tensor:
        (mu0, s0), (mu1, s1) = old, new
        return (torch.log(s1 / s0) + (s0**2 + (mu0 - mu1) ** 2) / (2 * s1**2) - 0.5).sum(-1)

    def std(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return params[1]


def log_one_minus_tanh_sq(u: torch.Tensor) -> torch.Tensor:
    """Numerically stable ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``."""
    return 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))


class TanhGaussian(Gaussian):
    """Gaussian over ``u``, actions ``tanh(u)`` in ``(-1, 1)``; ``log p(a) = log N(u) - sum log(1 - tanh(u)^2)``.

    The KL between two squashed Gaussians equals the KL of the underlying Gaussians (tanh is a bijection).
    """

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        return torch.tanh(raw)

    def log_prob(self, params: tuple[torch.Tensor, ...], raw: torch.Tensor) -> torch.Tensor:
        return super().log_prob(params, raw) - log_one_minus_tanh_sq(raw).sum(-1)

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        # H[tanh(u)] = H[u] + E[log |d tanh(u)/du|], the expectation estimated with one reparameterized sample.
        return super().entropy(params) + log_one_minus_tanh_sq(self.rsample(params)).sum(-1)


class BetaDist(ActionDistribution):
    """Beta distribution on ``(0, 1)`` per dimension (Chou et al. 2017), env actions ``2x - 1`` in ``(-1, 1)``.

    ``alpha, beta = 1 + softplus(head)`` keeps the density unimodal.
    """

    eps = 1e-6

    def __init__(self, num_actions: int) -> None:
        super().__init__()
        self.raw_dim = num_actions
        self.head_dim = 2 * num_actions

    def params(self, head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = head.chunk(2, dim=-1)
        return 1.0 + F.softplus(a), 1.0 + F.softplus(b)

    def _dist(self, params: tuple[torch.Tensor, ...]) -> Beta:
        return Beta(params[0], params[1], validate_args=False)

    def sample(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._dist(params).sample().clamp(self.eps, 1 - self.eps)

    def mode(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        a, b = params
        return ((a - 1) / (a + b - 2).clamp_min(self.eps)).clamp(self.eps, 1 - self.eps)

    def log_prob(self, params: tuple[torch.Tensor, ...], raw: torch.Tensor) -> torch.Tensor:
        return self._dist(params).log_prob(raw.clamp(self.eps, 1 - self.eps)).sum(-1)

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._dist(params).entropy().sum(-1)

    def kl(self, old: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return kl_divergence(self._dist(old), self._dist(new)).sum(-1)

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        return 2.0 * raw - 1.0

    def std(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._dist(params).variance.sqrt()


class CategoricalDist(ActionDistribution):
    """Categorical over ``n`` discrete actions; raw samples and env actions are the index as a float ``[B, 1]``."""

    def __init__(self, num_choices: int) -> None:
        super().__init__()
        self.raw_dim = 1
        self.head_dim = num_choices

    def params(self, head: torch.Tensor) -> tuple[torch.Tensor]:
        return (head - head.logsumexp(-1, keepdim=True),)

    def _dist(self, params: tuple[torch.Tensor, ...]) -> Categorical:
        return Categorical(logits=params[0], validate_args=False)

    def sample(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._dist(params).sample().unsqueeze(-1).float()

    def mode(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return params[0].argmax(-1, keepdim=True).float()

    def log_prob(self, params: tuple[torch.Tensor, ...], raw: torch.Tensor) -> torch.Tensor:
        return params[0].gather(-1, raw.long()).squeeze(-1)

    def entropy(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._dist(params).entropy()

    def kl(self, old: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return (old[0].exp() * (old[0] - new[0])).sum(-1)

    def std(self, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.entropy(params).unsqueeze(-1)


DISTRIBUTIONS = ("gaussian", "tanh_gaussian", "beta", "categorical")


def make_distribution(
    kind: str,
    num_actions: int,
    num_choices: int | None = None,
    init_std: float = 1.0,
    state_dependent_std: bool = False,
    min_std: float = 1e-3,
    max_std: float = 10.0,
) -> ActionDistribution:
    """Build an action distribution by name (one of :data:`DISTRIBUTIONS`).

    Raises:
        ValueError: for an unknown name, or a categorical policy without a discrete action count.
    """
    if kind == "gaussian":
        return Gaussian(num_actions, init_std, state_dependent_std, min_std, max_std)
    if kind == "tanh_gaussian":
        return TanhGaussian(num_actions, init_std, state_dependent_std, min_std, max_std)
    if kind == "beta":
        return BetaDist(num_actions)
    if kind == "categorical":
        if num_choices is None:
            raise ValueError("A categorical policy needs an env with a gymnasium Discrete action_space.")
        return CategoricalDist(num_choices)
    raise ValueError(f"Unknown distribution '{kind}'; choose one of {DISTRIBUTIONS}.")
