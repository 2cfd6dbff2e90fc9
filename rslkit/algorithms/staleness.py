"""Policy-gradient losses that tolerate stale data: decoupled PPO (AReaL), A-3PO's proximal policy, M2PO's mask.

An asynchronous learner trains on samples whose behaviour policy ``pi_behav`` is several versions older than the
policy being trained. Plain PPO anchors its trust region to ``pi_behav``; the decoupled objective (Fu et al. 2025,
AReaL, arXiv 2505.24298) anchors it to a *proximal* policy ``pi_prox``, the weights just before the current
update, and corrects for the behaviour policy with an importance weight outside the clip:

    L^dec = E[ w * min(u A, clip(u, 1 - eps, 1 + eps) A) ],   u = pi_theta / pi_prox,   w = pi_prox / pi_behav

``w`` carries no gradient and is capped (samples with ``w > cap`` masked out, or ``w`` clamped to the cap). With
fresh data ``pi_prox = pi_behav``, ``w = 1`` and ``L^dec`` is PPO's ``L^CLIP``.

A-3PO approximates ``pi_prox`` without a forward pass: for a sample of behaviour version ``v_b`` and a learner
about to produce version ``v + 1`` from version ``v``, ``log pi_prox = log pi_behav + alpha (log pi_theta -
log pi_behav)`` with ``alpha = (v - v_b) / (v + 1 - v_b)`` (log-linear in the version, ``pi_theta`` detached).

M2PO (Zheng et al. 2025) drops the samples with the largest second moment ``M2 = (log pi_prox - log pi_behav)^2``
until the mean ``M2`` of those kept is at most a threshold (0.04 in the paper).

All functions take per-sample tensors ``[B]`` (log-probabilities of whole actions, or of ReinFlow's normalized
chain) and are written as losses to minimize.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rslkit.utils.validation import expect, finite

Objective = Literal["ppo", "decoupled"]
Proximal = Literal["recompute", "loglinear"]
WeightMode = Literal["mask", "clamp"]


@dataclass
class StalenessCfg:
    """How PPO and ReinFlow treat samples from older policy versions (asynchronous actors, off-policy data).

    With the defaults (``objective="ppo"``, no M2 mask) the update is plain PPO against the behaviour policy.
    """

    objective: Objective = "ppo"
    """``ppo``: ``min(r A, clip(r) A)`` with ``r = pi_theta / pi_behav`` (naive on stale data). ``decoupled``:
    AReaL's ``w * min(u A, clip(u) A)`` with ``u = pi_theta / pi_prox``, ``w = pi_prox / pi_behav``."""
    proximal: Proximal = "recompute"
    """``pi_prox``: ``recompute`` (one forward pass of the pre-update policy over the batch) or ``loglinear``
    (A-3PO's interpolation between behaviour and current log-probabilities; needs the samples' versions)."""
    weight_cap: float | None = 5.0
    """Cap of the behaviour weight ``w`` (decoupled objective); None: uncapped."""
    weight_mode: WeightMode = "mask"
    """``mask``: samples with ``w > weight_cap`` drop out of the loss (AReaL). ``clamp``: ``w = min(w, cap)``."""
    m2_threshold: float | None = None
    """M2PO: drop the samples with the largest ``(log pi_prox - log pi_behav)^2`` until the mean of the rest is
    ``<=`` this (the paper's 0.04). None: off."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the losses cannot run with."""
        expect(
            self.objective in ("ppo", "decoupled"), "objective", f"must be 'ppo' or 'decoupled', got {self.objective!r}"
        )
        expect(
            self.proximal in ("recompute", "loglinear"),
            "proximal",
            f"must be 'recompute' or 'loglinear', got {self.proximal!r}",
        )
        expect(
            self.weight_mode in ("mask", "clamp"), "weight_mode", f"must be 'mask' or 'clamp', got {self.weight_mode!r}"
        )
        cap = self.weight_cap
        expect(cap is None or (finite(cap) and cap >= 1), "weight_cap", f"must be None or a number >= 1, got {cap}")
        m2 = self.m2_threshold
        expect(m2 is None or (finite(m2) and m2 > 0), "m2_threshold", f"must be None or a number > 0, got {m2}")

    @property
    def needs_proximal(self) -> bool:
        """Whether the update needs ``log pi_prox`` (the decoupled objective or the M2 mask)."""
        return self.objective == "decoupled" or self.m2_threshold is not None


def loglinear_proximal_log_prob(
    behaviour_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    behaviour_version: torch.Tensor,
    version: int,
) -> torch.Tensor:
    """A-3PO's ``log pi_prox = log pi_behav + alpha (log pi_theta - log pi_behav)``, no forward pass.

    Args:
        behaviour_log_prob: ``log pi_behav [B]``; log_prob: ``log pi_theta [B]`` of the policy being trained
            (detached here).
        behaviour_version: ``v_b [B]``, the version that produced each sample (``<= version``).
        version: ``v``, the learner's version before this update (the update produces ``v + 1``, ``pi_prox`` is
            version ``v``).

    Returns:
        ``log pi_prox [B]``, with ``alpha = (v - v_b) / (v + 1 - v_b)`` in ``[0, 1)``: 0 for fresh samples
        (``pi_prox = pi_behav``), towards 1 (``pi_prox -> pi_theta``) the staler they are.
    """
    gap = (version - behaviour_version.to(behaviour_log_prob.dtype)).clamp(min=0)
    alpha = gap / (gap + 1)
    return behaviour_log_prob + alpha * (log_prob.detach() - behaviour_log_prob)


def m2_mask(behaviour_log_prob: torch.Tensor, proximal_log_prob: torch.Tensor, threshold: float) -> torch.Tensor:
    """M2PO's mask: ``True`` for the samples kept once the largest ``M2 = (log pi_prox - log pi_behav)^2`` are
    dropped, the fewest such that the mean ``M2`` of the kept samples is ``<= threshold``. At least one is kept.

    Args:
        behaviour_log_prob, proximal_log_prob: ``[B]``.
        threshold: the largest mean second moment kept.

    Returns:
        A bool mask ``[B]``.
    """
    m2 = (proximal_log_prob.detach() - behaviour_log_prob.detach()).pow(2)
    n = m2.numel()
    if n == 0:
        return torch.ones_like(m2, dtype=torch.bool)
    sorted_m2, order = torch.sort(m2, descending=True)
    # mean of the kept suffix when the first k (largest) are dropped, for k = 0..n-1
    suffix_mean = sorted_m2.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, device=m2.device, dtype=m2.dtype)
    below = torch.nonzero(suffix_mean <= threshold)
    drop = int(below[0]) if below.numel() else n - 1
    keep_sorted = torch.arange(n, device=m2.device) >= drop
    keep = torch.empty_like(keep_sorted)
    keep[order] = keep_sorted
    return keep


def behaviour_weight(
    proximal_log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor, cap: float | None, mode: WeightMode
) -> tuple[torch.Tensor, torch.Tensor]:
    """``w = pi_prox / pi_behav`` (no gradient), capped, and the mask of the samples it keeps.

    Returns:
        ``(w [B], kept [B] bool)``: with ``mode="mask"`` samples with ``w > cap`` get ``w = 0`` and ``kept = False``;
        with ``"clamp"`` ``w = min(w, cap)`` and every sample is kept.
    """
    w = torch.exp(proximal_log_prob.detach() - behaviour_log_prob.detach())
    kept = torch.ones_like(w, dtype=torch.bool)
    if cap is not None:
        if mode == "mask":
            kept = w <= cap
            w = torch.where(kept, w, torch.zeros_like(w))
        else:
            w = w.clamp(max=cap)
    return w, kept


def decoupled_surrogate(
    log_prob: torch.Tensor,
    proximal_log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    weight_cap: float | None = 5.0,
    weight_mode: WeightMode = "mask",
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``-L^dec = -E[w min(u A, clip(u, 1 - eps, 1 + eps) A)]``, averaged over the samples in ``mask``.

    Args:
        log_prob: ``log pi_theta [B]`` (with gradient); proximal_log_prob, behaviour_log_prob: ``[B]``.
        advantages: ``A [B]``; clip: ``eps``.
        weight_cap, weight_mode: see :func:`behaviour_weight`.
        mask: samples in the average (M2PO's mask); None: all. Samples the weight cap masks stay in the
            denominator (AReaL).

    Returns:
        ``(loss, statistics)``: ``u`` (ratio to the proximal policy), ``w``, and the weight-kept mask.
    """
    u = torch.exp(log_prob - proximal_log_prob.detach())
    w, kept = behaviour_weight(proximal_log_prob, behaviour_log_prob, weight_cap, weight_mode)
    per_sample = w * torch.min(u * advantages, u.clamp(1 - clip, 1 + clip) * advantages)
    if mask is None:
        loss = -per_sample.mean()
    else:
        loss = -(per_sample * mask).sum() / mask.sum().clamp(min=1)
    return loss, {"u": u.detach(), "w": w, "w_kept": kept}


def masked_clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """PPO's ``-L^CLIP = -E[min(r A, clip(r, 1 - eps, 1 + eps) A)]`` over the samples in ``mask`` (None: all)."""
    per_sample = torch.min(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    if mask is None:
        return -per_sample.mean()
    return -(per_sample * mask).sum() / mask.sum().clamp(min=1)


def policy_loss(
    cfg: StalenessCfg,
    log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    proximal_log_prob: torch.Tensor | None = None,
    behaviour_version: torch.Tensor | None = None,
    version: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The actor's surrogate loss under ``cfg``: PPO's or the decoupled one, with M2PO's mask if configured.

    Args:
        cfg: the objective, proximal policy, weight cap and M2 threshold.
        log_prob: ``log pi_theta [B]`` with gradient; behaviour_log_prob: ``log pi_behav [B]`` from the rollout.
        advantages: ``A [B]``; clip: PPO's ``eps``.
        proximal_log_prob: ``log pi_prox [B]`` recomputed before the update (``proximal="recompute"``).
        behaviour_version: the samples' policy versions ``[B]`` (``proximal="loglinear"``).
        version: the learner's version before this update.

    Returns:
        ``(loss, ratio, statistics)``: ``ratio`` is the clipped one (``u`` or ``r``, detached), the statistics the
        behaviour weight's mean and max, the fraction of samples masked (weight cap or M2) and the mean ``M2``.
    """
    prox = None
    if cfg.needs_proximal:
        if cfg.proximal == "loglinear":
            if behaviour_version is None:
                raise ValueError("proximal='loglinear' needs the samples' policy versions (behaviour_version).")
            prox = loglinear_proximal_log_prob(behaviour_log_prob, log_prob, behaviour_version, version)
        elif proximal_log_prob is None:
            raise ValueError("proximal='recompute' needs the proximal log-probabilities recomputed before the update.")
        else:
            prox = proximal_log_prob
    keep = (
        m2_mask(behaviour_log_prob, prox, cfg.m2_threshold)
        if cfg.m2_threshold is not None and prox is not None
        else None
    )
    stats: dict[str, torch.Tensor] = {}
    if cfg.objective == "decoupled":
        assert prox is not None
        loss, parts = decoupled_surrogate(
            log_prob, prox, behaviour_log_prob, advantages, clip, cfg.weight_cap, cfg.weight_mode, keep
        )
        ratio = parts["u"]
        kept = parts["w_kept"] if keep is None else parts["w_kept"] & keep
        stats["behaviour_weight_mean"] = parts["w"].mean()
        stats["behaviour_weight_max"] = parts["w"].max()
        stats["kl_prox"] = ((ratio - 1) - torch.log(ratio)).mean()  # k3 estimate of KL(pi_prox || pi_theta)
    else:
        ratio = torch.exp(log_prob - behaviour_log_prob).detach()
        loss = masked_clipped_surrogate(torch.exp(log_prob - behaviour_log_prob), advantages, clip, keep)
        kept = keep if keep is not None else torch.ones_like(ratio, dtype=torch.bool)
    stats["masked_fraction"] = 1.0 - kept.float().mean()
    if prox is not None:
        stats["m2"] = (prox.detach() - behaviour_log_prob.detach()).pow(2).mean()
    return loss, ratio, stats


STALENESS_STATS = (
    "staleness_mean",
    "staleness_max",
    "behaviour_weight_mean",
    "behaviour_weight_max",
    "masked_fraction",
    "m2",
)
"""Update statistics about stale data; runners log them under ``Staleness/`` instead of ``Loss/``."""


def update_metrics(stats: dict[str, float]) -> dict[str, float]:
    """An update's statistics as logged metrics: ``Staleness/<name>`` for :data:`STALENESS_STATS`, ``Loss/<name>``
    for the rest."""
    return {f"{'Staleness' if k in STALENESS_STATS else 'Loss'}/{k}": v for k, v in stats.items()}
