"""What every stochastic chain of a flow policy shares: the policy interface it needs, Gaussian log-densities, the
stored record of a sampled chain and the deterministic ODE.

Two chains turn a flow policy's K-step Euler sampler into a Markov process with an exact likelihood for PPO:
:class:`~rslkit.models.flow.noisy_chain.NoisyFlowChain` (ReinFlow / pi_RL's Flow-Noise: every step Gaussian with a
learned std) and :class:`~rslkit.models.flow.sde_chain.FlowSDEChain` (pi_RL's Flow-SDE: one randomly chosen step
Gaussian by the ODE -> SDE conversion, the rest deterministic). Both need only the policy's velocity field
(:class:`ChainPolicy`), so they run over any chunk flow policy (state flow policies, VLAs).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Protocol

import torch
import torch.nn as nn

from rslkit.data.normalizer import MinMaxNormalizer
from rslkit.models.flow.sampler import time_grid

LOG_2PI = math.log(2 * math.pi)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_var: torch.Tensor) -> torch.Tensor:
    """Elementwise ``log N(x; mean, exp(log_var))``."""
    return -0.5 * ((x - mean) ** 2 * torch.exp(-log_var) + log_var + LOG_2PI)


class ChainPolicy(Protocol):
    """What a chain needs of a flow policy (an ``nn.Module``).

    ``inputs`` are the policy's normalized inputs (a ``[B, D]`` tensor, or a TensorDict ``[B]`` of groups); the
    *context* is what every Euler step is conditioned on, computed once per chain (``[B, ...]``).
    """

    obs_dim: int
    """Size of the (state) observation the policy's ``obs_normalizer`` takes."""
    horizon: int
    action_dim: int
    obs_normalizer: MinMaxNormalizer
    action_normalizer: MinMaxNormalizer

    @property
    def noise_feature_dim(self) -> int:
        """Size of :meth:`noise_features`."""
        ...

    def chain_context(self, inputs: Any) -> torch.Tensor:
        """Context ``[B, ...]`` of normalized ``inputs``."""
        ...

    def chain_velocity(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, num_steps: int) -> torch.Tensor:
        """``v(x [B, Ta, A], t [B], context [B, ...]) -> [B, Ta, A]`` in a chain of ``num_steps``."""
        ...

    def noise_features(self, context: torch.Tensor) -> torch.Tensor:
        """``[B, noise_feature_dim]``: what a noise net reads of the context."""
        ...

    def sample_normalized(
        self, inputs: Any, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """The deterministic Euler ODE from ``x0``: a normalized chunk ``[B, Ta, A]``."""
        ...


class FlowChain(nn.Module, ABC):
    """Base of the stochastic chains: a sampled chain is stored as a *record* ``[B, S, Ta, A]`` of ``S`` slabs whose
    last is the executed sample ``a_K`` (normalized action space); :attr:`chain_dim` numbers per record.

    Subclasses implement :meth:`sample`, :meth:`log_prob`, :meth:`initial_noise`, :meth:`mean_std` and set
    :attr:`record_slabs`.

    Args:
        policy: the flow policy (a :class:`ChainPolicy`).
        num_steps: ``K`` (also the number of steps of the deterministic deployment ODE).
    """

    record_slabs: int
    """``S``: slabs of ``Ta x A`` numbers in one record."""

    def __init__(self, policy: ChainPolicy, num_steps: int) -> None:
        super().__init__()
        time_grid(num_steps)  # validates K
        self.policy = policy
        self.num_steps = num_steps
        self.horizon, self.action_dim = policy.horizon, policy.action_dim

    @property
    def chain_dim(self) -> int:
        """Numbers in one stored record: ``S * Ta * A``."""
        return self.record_slabs * self.horizon * self.action_dim

    def unflatten(self, flat: torch.Tensor) -> torch.Tensor:
        """``[B, chain_dim]`` (as stored in a rollout) -> the record ``[B, S, Ta, A]``."""
        return flat.view(flat.shape[0], self.record_slabs, self.horizon, self.action_dim)

    def final_sample(self, record: torch.Tensor) -> torch.Tensor:
        """The executed sample ``a_K [B, Ta, A]`` of a record (normalized action space)."""
        return record[:, -1]

    def ode_step(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """One deterministic Euler step ``a_k + v(a_k, t_k, o) / K``."""
        return x + self.policy.chain_velocity(x, t, context, self.num_steps) / self.num_steps

    def deterministic_actions(self, inputs: Any, x0: torch.Tensor) -> torch.Tensor:
        """Final sample ``a_K [B, Ta, A]`` of the noise-free chain from ``x0`` (differentiable; W2 regularizer)."""
        context = self.policy.chain_context(inputs)
        x = x0
        for t in time_grid(self.num_steps, context.device):
            x = self.ode_step(x, t.expand(x.shape[0]), context)
        return x

    @abstractmethod
    def sample(self, inputs: Any, deterministic: bool = False, x0: torch.Tensor | None = None) -> torch.Tensor:
        """A record ``[B, S, Ta, A]`` per input (``deterministic``: the noise-free ODE; ``x0``: the initial noise)."""

    @abstractmethod
    def log_prob(self, inputs: Any, record: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_prob [B], entropy [B])`` of stored records."""

    @abstractmethod
    def normalized_log_prob(self, inputs: Any, record: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`log_prob` and entropy per Gaussian scalar (PPO's ratio of these stays near 1)."""

    @abstractmethod
    def initial_noise(self, record: torch.Tensor) -> torch.Tensor:
        """``a_0 [B, Ta, A]`` of a record."""

    @abstractmethod
    def mean_std(self, inputs: Any) -> float:
        """Mean std of the chain's Gaussian steps at ``inputs`` (logging)."""
