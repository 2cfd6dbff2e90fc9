"""ReinFlow's noisy Euler chain: a K-step flow sampler turned into a Markov process with exact likelihood.

Each Euler step becomes Gaussian (Zhang et al. 2025, "ReinFlow", arXiv 2505.22094):

    a_0 ~ N(0, I),    a_{k+1} ~ N(a_k + v(a_k, t_k, o) / K,  sigma_k^2),    t_k = k / K,

so the log-likelihood of a whole chain is exact:

    log pi(a_0..a_K | o) = log N(a_0; 0, I) + sum_{k<K} log N(a_{k+1}; a_k + v(a_k, t_k, o) / K, sigma_k^2).

The env executes ``a_K`` (clipped to ``[-1, 1]``, unnormalized); deployment drops the noise (the plain ODE at the
same K). Sampling and :meth:`NoisyFlowChain.log_prob` share :func:`~rslkit.models.flow.sampler.time_grid`.

The chain runs over any flow policy that implements :class:`ChainPolicy`: the state-only
:class:`~rslkit.models.flow.FlowPolicy` (its context is the normalized observation) and the VLA policy
(:class:`~rslkit.models.vla.VLAPolicy`: its context is the observation tokens, computed once per chain).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rslkit.models.flow.chain import LOG_2PI, ChainPolicy, FlowChain, gaussian_log_prob
from rslkit.models.flow.noise_net import BoundedNoiseNet
from rslkit.models.flow.sampler import time_grid


class NoisyFlowChain(FlowChain):
    """The stochastic K-step chain of a flow policy (the ReinFlow actor).

    Args:
        policy: the flow policy whose velocity net is fine-tuned (a :class:`ChainPolicy`).
        num_steps: ``K`` (also the number of steps of the deterministic deployment ODE).
        noise_net: learnable bounded noise (ReinFlow); None with ``fixed_sigma`` for a fixed-noise chain
            (DPPO-style baseline).
        fixed_sigma: constant ``sigma`` when ``noise_net`` is None.
    """

    def __init__(
        self,
        policy: ChainPolicy,
        num_steps: int,
        noise_net: BoundedNoiseNet | None = None,
        fixed_sigma: float | None = None,
    ) -> None:
        super().__init__(policy, num_steps)
        if (noise_net is None) == (fixed_sigma is None):
            raise ValueError("Give the chain either a noise network or a fixed sigma, not both or neither.")
        if fixed_sigma is not None and fixed_sigma <= 0:
            raise ValueError(f"fixed_sigma must be > 0, got {fixed_sigma}.")
        self.noise_net = noise_net
        self.fixed_log_var = 2 * math.log(fixed_sigma) if fixed_sigma is not None else 0.0
        self.record_slabs = num_steps + 1
        """The record is the whole chain ``a_0, ..., a_K``."""

    def transition(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean ``a_k + v / K`` and ``log sigma_k^2`` (both ``[B, Ta, A]``) of the step from ``x = a_k`` at ``t``,
        given the policy's context (:meth:`ChainPolicy.chain_context`; the normalized observation of a
        :class:`~rslkit.models.flow.FlowPolicy`)."""
        mean = self.ode_step(x, t, context)
        if self.noise_net is None:
            return mean, torch.full_like(mean, self.fixed_log_var)
        return mean, self.noise_net.log_var(x, t, self.policy.noise_features(context))

    def sample(self, inputs: Any, deterministic: bool = False, x0: torch.Tensor | None = None) -> torch.Tensor:
        """Run the chain.

        Args:
            inputs: the policy's normalized inputs (``[B, D]`` observations of a flow policy).
            deterministic: drop the noise (the plain Euler ODE of the policy).
            x0: ``[B, Ta, A]`` initial noise; drawn from ``N(0, I)`` if None.

        Returns:
            ``[B, K + 1, Ta, A]`` the whole chain ``a_0, ..., a_K`` (normalized action space).
        """
        context = self.policy.chain_context(inputs)
        b = context.shape[0]
        x = torch.randn(b, self.horizon, self.action_dim, device=context.device) if x0 is None else x0
        chain = [x]
        for t in time_grid(self.num_steps, context.device):
            mean, log_var = self.transition(x, t.expand(b), context)
            x = mean if deterministic else mean + torch.exp(0.5 * log_var) * torch.randn_like(mean)
            chain.append(x)
        return torch.stack(chain, dim=1)

    def transitions(self, inputs: Any, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and ``log sigma^2`` of all K steps of stored chains in one batched pass, on the time grid of
        :meth:`sample`: both ``[B * K, Ta, A]``, row ``i * K + k`` the step ``a_k -> a_{k+1}`` of chain ``i``.

        Raises:
            ValueError: when the chains have another number of steps than this chain's K.
        """
        b, k1 = chain.shape[:2]
        k = k1 - 1
        if k != self.num_steps:
            raise ValueError(f"Stored chains have {k} steps, this policy runs K = {self.num_steps}.")
        context = self.policy.chain_context(inputs)
        x = chain[:, :-1].reshape(b * k, self.horizon, self.action_dim)
        t = time_grid(k, chain.device).repeat(b)
        return self.transition(x, t, context.repeat_interleave(k, dim=0))

    def log_prob(self, inputs: Any, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact log-likelihood of stored chains and the entropy of their Gaussian steps.

        Args:
            inputs: the policy's normalized inputs (``[B, D]`` observations of a flow policy).
            chain: ``[B, K + 1, Ta, A]``.

        Returns:
            ``(log_prob [B], entropy [B])``: ``log N(a_0; 0, I) + sum_k log N(a_{k+1}; mu_k, sigma_k^2)`` summed
            over chain steps and dimensions, and ``sum_k H[N(mu_k, sigma_k^2)]``.
        """
        b = chain.shape[0]
        mean, log_var = self.transitions(inputs, chain)
        steps = gaussian_log_prob(chain[:, 1:].reshape_as(mean), mean, log_var).view(b, -1).sum(-1)
        initial = gaussian_log_prob(chain[:, 0], torch.zeros_like(chain[:, 0]), torch.zeros_like(chain[:, 0]))
        entropy = (0.5 * (log_var + LOG_2PI + 1.0)).view(b, -1).sum(-1)
        return initial.view(b, -1).sum(-1) + steps, entropy

    def normalized_log_prob(self, inputs: Any, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`log_prob` and entropy divided by the number of Gaussian scalars: ``(K + 1) Ta A`` for the
        log-prob (chain steps incl. ``a_0``), ``K Ta A`` for the entropy. The PPO ratio of these per-dimension,
        per-step values is the geometric mean of the scalar ratios, which keeps it near 1 for long chains and
        makes ReinFlow's small clip range (0.01) meaningful."""
        log_prob, entropy = self.log_prob(inputs, chain)
        scalars = self.horizon * self.action_dim
        return log_prob / ((self.num_steps + 1) * scalars), entropy / (self.num_steps * scalars)

    def initial_noise(self, record: torch.Tensor) -> torch.Tensor:
        """``a_0 [B, Ta, A]``: the first slab of the chain."""
        return record[:, 0]

    def mean_std(self, inputs: Any) -> float:
        """Mean noise std of the steps of a fresh chain at ``inputs`` (logging)."""
        _, log_var = self.transitions(inputs, self.sample(inputs))
        return float(torch.exp(0.5 * log_var).mean())
