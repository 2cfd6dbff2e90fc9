"""pi_RL's Flow-SDE chain (Chen et al. 2025, "pi_RL", arXiv 2510.25889): a flow policy's K-step sampler with one
randomly chosen stochastic step, from the ODE -> SDE conversion of the flow.

pi_RL writes time as the remaining noise ``s`` (``s = 1`` noise, ``s = 0`` data) and the velocity ``v`` as pointing
to the noise; rslkit's flow policies run ``t = 1 - s`` from noise (``t = 0``) to data with the velocity
``u = -v`` pointing to the data. With the step size ``D = 1/K``, step ``k`` starts at ``s = 1 - k/K`` from ``x = a_k``:

    x0_hat = x - v s       = x + u s            (the data the step points at)
    x1_hat = x + v (1 - s) = x - u (1 - s)      (the noise it came from)
    sigma  = a sqrt(s / (1 - s))                (``1 - s`` taken as ``D`` at ``s = 1``, as RLinf does)
    mean   = x0_hat (1 - (s - D)) + x1_hat (s - D - sigma^2 D / (2 s))
    std    = sqrt(D) sigma

(``a`` is the noise level, 0.5 in pi_RL). With ``sigma = 0`` the mean is the Euler step ``x + u D``. Per chain one step
``j``, drawn uniformly from ``0 .. K-1``, is this Gaussian; every other step runs the ODE. PPO's log-probability is
that step's: ``log pi(chain | o) = log N(a_{j+1}; mean_j(a_j, o), std_j^2)`` (the ODE steps are deterministic given
their start; the initial noise does not depend on the policy). The std depends only on the time, so the entropy is
a constant of the step: Flow-SDE has no learned noise.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rslkit.models.flow.chain import LOG_2PI, ChainPolicy, FlowChain, gaussian_log_prob
from rslkit.models.flow.sampler import time_grid


class FlowSDEChain(FlowChain):
    """Flow-SDE over a flow policy (a :class:`~rslkit.models.flow.chain.ChainPolicy`; only its velocity is used).

    A record is ``[B, K + 2, Ta, A]``: slab 0 holds the index ``j`` of the stochastic step (the same number in every
    entry), slabs ``1 .. K + 1`` the chain ``a_0, ..., a_K`` (so the last slab is the executed sample).

    Args:
        policy: the flow policy whose velocity net is fine-tuned.
        num_steps: ``K`` (also the number of steps of the deterministic deployment ODE).
        noise_level: ``a`` of ``sigma = a sqrt(s / (1 - s))`` (pi_RL: 0.5); 0 makes every step the ODE (sampling
            only: the log-probability needs ``a > 0``).

    Raises:
        ValueError: for a negative or non-finite noise level.
    """

    def __init__(self, policy: ChainPolicy, num_steps: int, noise_level: float = 0.5) -> None:
        super().__init__(policy, num_steps)
        if not (math.isfinite(noise_level) and noise_level >= 0):
            raise ValueError(f"The Flow-SDE noise level must be a finite number >= 0, got {noise_level}.")
        self.noise_level = noise_level
        self.record_slabs = num_steps + 2

    def step_std(self, t: torch.Tensor) -> torch.Tensor:
        """``sigma [B]`` of steps starting at rslkit's time ``t [B]`` (``s = 1 - t``; ``1 - s = t`` is taken as
        ``D`` at ``t = 0``, where ``s / (1 - s)`` is infinite)."""
        d = 1.0 / self.num_steps
        return self.noise_level * torch.sqrt((1.0 - t) / t.clamp(min=d))

    def sde_step(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std (both ``[B, Ta, A]``) of the stochastic step from ``x = a_k`` at ``t [B]`` (see the module
        docstring for the equations)."""
        d = 1.0 / self.num_steps
        u = self.policy.chain_velocity(x, t, context, self.num_steps)
        s = (1.0 - t).view(-1, 1, 1)
        sigma = self.step_std(t).view(-1, 1, 1)
        x0_hat = x + u * s
        x1_hat = x - u * (1.0 - s)
        mean = x0_hat * (1.0 - (s - d)) + x1_hat * (s - d - sigma**2 * d / (2.0 * s))
        return mean, (math.sqrt(d) * sigma).expand_as(mean)

    def sample(
        self,
        inputs: Any,
        deterministic: bool = False,
        x0: torch.Tensor | None = None,
        step: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the chain: the ODE at every step but ``j``, the SDE step at ``j``.

        Args:
            inputs: the policy's normalized inputs.
            deterministic: the plain ODE at every step (``j`` is still drawn and recorded).
            x0: ``[B, Ta, A]`` initial noise; drawn from ``N(0, I)`` if None.
            step: ``[B]`` indices ``j`` of the stochastic step; drawn uniformly from ``0 .. K-1`` if None.

        Returns:
            The record ``[B, K + 2, Ta, A]``.
        """
        context = self.policy.chain_context(inputs)
        b, k = context.shape[0], self.num_steps
        x = torch.randn(b, self.horizon, self.action_dim, device=context.device) if x0 is None else x0
        j = torch.randint(0, k, (b,), device=context.device) if step is None else step.to(context.device)
        chain = [x]
        for i, t in enumerate(time_grid(k, context.device)):
            tb = t.expand(b)
            ode = self.ode_step(x, tb, context)
            stochastic = (j == i).view(-1, 1, 1)
            if deterministic or not bool(stochastic.any()):
                x = ode
            else:
                mean, std = self.sde_step(x, tb, context)
                x = torch.where(stochastic, mean + std * torch.randn_like(mean), ode)
            chain.append(x)
        index = j.to(x.dtype).view(-1, 1, 1, 1).expand(b, 1, self.horizon, self.action_dim)
        return torch.cat((index, torch.stack(chain, dim=1)), dim=1)

    def stochastic_step(self, record: torch.Tensor) -> torch.Tensor:
        """The index ``j [B]`` (long) of a record's stochastic step."""
        return record[:, 0, 0, 0].round().long()

    def initial_noise(self, record: torch.Tensor) -> torch.Tensor:
        """``a_0 [B, Ta, A]`` of a record."""
        return record[:, 1]

    def log_prob(self, inputs: Any, record: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact log-likelihood of the stochastic step of stored records and its entropy.

        Returns:
            ``(log_prob [B], entropy [B])``: ``log N(a_{j+1}; mean_j, std_j^2)`` and ``H[N(mean_j, std_j^2)]``,
            summed over ``Ta x A``.

        Raises:
            ValueError: for records of another K, or a chain without noise (``noise_level`` 0).
        """
        if record.shape[1] != self.record_slabs:
            raise ValueError(
                f"Stored Flow-SDE records have {record.shape[1] - 2} steps, this policy runs K = {self.num_steps}."
            )
        if self.noise_level == 0:
            raise ValueError("Flow-SDE with noise_level 0 has no density; set --agent.algorithm.noise_level > 0.")
        b = record.shape[0]
        j = self.stochastic_step(record)
        rows = torch.arange(b, device=record.device)
        x, target = record[rows, j + 1], record[rows, j + 2]
        t = j.to(record.dtype) / self.num_steps
        mean, std = self.sde_step(x, t, self.policy.chain_context(inputs))
        log_var = 2.0 * torch.log(std)
        log_prob = gaussian_log_prob(target, mean, log_var).view(b, -1).sum(-1)
        entropy = (0.5 * (log_var + LOG_2PI + 1.0)).view(b, -1).sum(-1)
        return log_prob, entropy

    def normalized_log_prob(self, inputs: Any, record: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`log_prob` and entropy divided by the ``Ta A`` Gaussian scalars of the one stochastic step."""
        log_prob, entropy = self.log_prob(inputs, record)
        scalars = self.horizon * self.action_dim
        return log_prob / scalars, entropy / scalars

    def mean_std(self, inputs: Any) -> float:
        """Mean std ``sqrt(D) sigma`` over the K steps (the step is drawn uniformly; independent of ``inputs``)."""
        t = time_grid(self.num_steps)
        return float((math.sqrt(1.0 / self.num_steps) * self.step_std(t)).mean())
