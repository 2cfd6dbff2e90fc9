"""Training objectives of flow policies: rectified flow (flow matching) and shortcut models.

They take any :class:`FlowModel`: the state-only :class:`~rslkit.models.flow.FlowPolicy` (conditioning: a vector)
or the VLA-style :class:`~rslkit.models.vla.VLAPolicy` (conditioning: observation tokens).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn


class FlowModel(Protocol):
    """What the objectives need of a policy: its conditioning of normalized observations and its velocity net
    ``net(x_t [B, Ta, A], t [B], conditioning, d [B] or None) -> [B, Ta, A]``."""

    @property
    def net(self) -> nn.Module: ...

    @property
    def step_conditioned(self) -> bool: ...

    def conditioning(self, obs_n: Any, future_n: torch.Tensor | None = None) -> torch.Tensor: ...

    def sample_time(
        self, batch: int, generator: torch.Generator | None = None, device: torch.device | None = None
    ) -> torch.Tensor: ...


def uniform_time(
    batch: int, generator: torch.Generator | None = None, device: torch.device | None = None
) -> torch.Tensor:
    """Training times ``t ~ U[0, 1]`` ``[B]`` (rectified flow's; a policy may train on another distribution, e.g.
    SmolVLA's Beta, through its ``sample_time``)."""
    return torch.rand(batch, generator=generator, device=device)


def rectified_flow_loss(
    policy: FlowModel,
    obs_n: Any,
    x1: torch.Tensor,
    generator: torch.Generator | None = None,
    future_n: torch.Tensor | None = None,
    conditioning: torch.Tensor | None = None,
) -> torch.Tensor:
    """Conditional flow-matching loss of a batch (Liu et al. 2022; Lipman et al. 2022).

    ``L = E_{t ~ p(t), x0 ~ N(0,I)} |v(x_t, t, o) - (x1 - x0)|^2`` with ``x_t = t x1 + (1 - t) x0`` and the policy's
    training-time distribution ``p(t)`` (``policy.sample_time``: U[0, 1] for rslkit's policies, LeRobot's Beta for
    SmolVLA).

    Args:
        policy: the flow policy.
        obs_n: ``[B, D]`` normalized observations (a VLA policy: its normalized input groups ``[B]``).
        x1: ``[B, Ta, A]`` normalized demonstrated action chunks (data, ``t = 1``).
        future_n: ``[B, S]`` normalized future states (future-state policies; default: the observed state).
        conditioning: ``policy.conditioning(obs_n, future_n)`` when the caller has it already (e.g. observation
            tokens that an auxiliary loss reads too); ``obs_n`` and ``future_n`` are then not used.

    Returns:
        Scalar loss (mean over batch, chunk and action dims).
    """
    obs_n = policy.conditioning(obs_n, future_n) if conditioning is None else conditioning
    x0 = torch.randn(x1.shape, generator=generator, device=x1.device)
    t = policy.sample_time(x1.shape[0], generator, x1.device)
    x_t = t.view(-1, 1, 1) * x1 + (1 - t.view(-1, 1, 1)) * x0
    d = torch.zeros_like(t) if policy.step_conditioned else None
    v = policy.net(x_t, t, obs_n, d)
    return ((v - (x1 - x0)) ** 2).mean()


def shortcut_loss(
    policy: FlowModel,
    obs_n: Any,
    x1: torch.Tensor,
    bootstrap_fraction: float = 0.25,
    min_step_log2: int = 7,
    target: FlowModel | None = None,
    generator: torch.Generator | None = None,
    future_n: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Shortcut-model loss (Frans et al. 2024, "One Step Diffusion via Shortcut Models").

    The net ``s(x_t, t, d)`` predicts the normalized jump of a step of size ``d``. Most of the batch trains the
    flow-matching case ``d = 0`` (``s -> x1 - x0``); a ``bootstrap_fraction`` trains self-consistency:
    ``s(x_t, t, 2d) -> sg[(s(x_t, t, d) + s(x'_{t+d}, t + d, d)) / 2]`` with ``x'_{t+d} = x_t + d s(x_t, t, d)``,
    for ``d = 2^-j``, ``j`` uniform in ``1..min_step_log2`` and ``t`` on the grid of multiples of ``d`` (so that
    ``t + 2d <= 1``). The smallest ``d`` queries the targets at ``d = 0``.

    Args:
        policy: a step-conditioned flow policy (``objective == "shortcut"``).
        obs_n: ``[B, D]`` normalized observations.
        x1: ``[B, Ta, A]`` normalized action chunks.
        bootstrap_fraction: share of the batch used for self-consistency targets.
        min_step_log2: the smallest step is ``2^-min_step_log2`` (the paper's M = 128 is 7).
        target: model that computes the self-consistency targets (e.g. the EMA copy); ``policy`` itself if None.
        future_n: ``[B, S]`` normalized future states (future-state policies; default: the observed state).

    Returns:
        ``(loss, {"flow_matching": ..., "self_consistency": ...})``.
    """
    obs_n = policy.conditioning(obs_n, future_n)
    if not policy.step_conditioned:
        raise ValueError("The shortcut loss needs a step-conditioned policy; set policy.objective 'shortcut'.")
    target = target or policy
    b = x1.shape[0]
    n_boot = min(b - 1, max(1, int(round(bootstrap_fraction * b))))
    dev = x1.device
    x0 = torch.randn(x1.shape, generator=generator, device=dev)
    # Self-consistency part: the first n_boot samples.
    j = torch.randint(1, min_step_log2 + 1, (n_boot,), generator=generator, device=dev)
    d = torch.pow(2.0, -j.float())
    slots = (1.0 / d - 1).clamp_min(1.0)  # t in {0, d, ..., 1 - 2d}
    t_boot = torch.floor(torch.rand(n_boot, generator=generator, device=dev) * slots) * d
    xb0, xb1, ob = x0[:n_boot], x1[:n_boot], obs_n[:n_boot]
    xt = t_boot.view(-1, 1, 1) * xb1 + (1 - t_boot.view(-1, 1, 1)) * xb0
    d_query = torch.where(j == min_step_log2, torch.zeros_like(d), d)
    with torch.no_grad():
        s1 = target.net(xt, t_boot, ob, d_query)
        x_mid = xt + d.view(-1, 1, 1) * s1
        s2 = target.net(x_mid, t_boot + d, ob, d_query)
        boot_target = (s1 + s2) / 2
    boot_pred = policy.net(xt, t_boot, ob, 2 * d)
    # Flow-matching part (d = 0): the rest of the batch.
    xf0, xf1, of = x0[n_boot:], x1[n_boot:], obs_n[n_boot:]
    t = torch.rand(b - n_boot, generator=generator, device=dev)
    xt_f = t.view(-1, 1, 1) * xf1 + (1 - t.view(-1, 1, 1)) * xf0
    fm_pred = policy.net(xt_f, t, of, torch.zeros_like(t))
    fm = ((fm_pred - (xf1 - xf0)) ** 2).mean()
    sc = ((boot_pred - boot_target) ** 2).mean()
    w = n_boot / b
    return (1 - w) * fm + w * sc, {"flow_matching": fm.detach(), "self_consistency": sc.detach()}
