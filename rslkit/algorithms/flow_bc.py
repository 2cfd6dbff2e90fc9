"""Behaviour cloning of a flow-matching action-chunk policy (rectified flow or shortcut objective) with EMA."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.flow.ema import EMA
from rslkit.models.flow.objectives import rectified_flow_loss, shortcut_loss
from rslkit.models.flow.policy import FlowPolicy
from rslkit.models.vla.policy import VLAPolicy
from rslkit.utils.validation import expect, finite


@dataclass
class FlowBCCfg:
    """Optimization of the flow-matching loss. CLI: ``--agent.algorithm.<field>``."""

    learning_rate: float = 1e-3
    weight_decay: float = 1e-6
    batch_size: int = 256
    max_grad_norm: float = 1.0
    ema_decay: float = 0.995
    """Decay of the weight average used for evaluation, checkpoints' deployed policy and ReinFlow's start."""
    bootstrap_fraction: float = 0.25
    """Shortcut objective: share of each batch trained on self-consistency targets."""
    min_step_log2: int = 7
    """Shortcut objective: smallest step size ``2^-min_step_log2``."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field behaviour cloning cannot run with."""
        for name in ("learning_rate", "max_grad_norm"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        wd = self.weight_decay
        expect(finite(wd) and wd >= 0, "weight_decay", f"must be a finite number >= 0, got {wd}")
        batch = self.batch_size
        expect(isinstance(batch, int) and batch >= 2, "batch_size", f"must be an integer >= 2, got {batch}")
        expect(
            finite(self.ema_decay) and 0 <= self.ema_decay < 1, "ema_decay", f"must be in [0, 1), got {self.ema_decay}"
        )
        frac = self.bootstrap_fraction
        expect(finite(frac) and 0 <= frac <= 1, "bootstrap_fraction", f"must be in [0, 1], got {frac}")
        log2 = self.min_step_log2
        expect(isinstance(log2, int) and log2 >= 1, "min_step_log2", f"must be an integer >= 1, got {log2}")


P = TypeVar("P", FlowPolicy, VLAPolicy)


class FlowBC(Generic[P]):
    """Fits a :class:`~rslkit.models.flow.FlowPolicy` (or a :class:`~rslkit.models.vla.VLAPolicy`) to demonstrated
    action chunks.

    The loss follows ``policy.cfg.objective``: ``rectified_flow`` (``|v(x_t, t, o) - (x1 - x0)|^2``) or ``shortcut``
    (flow matching at ``d = 0`` plus self-consistency targets from the EMA model).

    Args:
        policy: the policy (its normalizers must hold the dataset statistics).
        cfg: optimization settings.
        device: training device.
    """

    def __init__(self, policy: P, cfg: FlowBCCfg, device: str | torch.device = "cpu") -> None:
        if cfg.batch_size < 2:
            raise ValueError(f"batch_size must be >= 2, got {cfg.batch_size}.")
        self.cfg = cfg
        self.device = torch.device(device)
        self.policy: P = policy.to(self.device)
        self.optimizer = torch.optim.AdamW(
            policy.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay, fused=True
        )
        self.ema: EMA[P] = EMA(policy, cfg.ema_decay)

    def update(
        self, obs: torch.Tensor | TensorDict, actions: torch.Tensor, future_state: torch.Tensor | None = None
    ) -> dict[str, float]:
        """One gradient step on a batch of raw observations ``[B, D]`` (a VLA policy: its raw observation groups
        ``[B]``) and action chunks ``[B, Ta, A]``.

        Future-state policies (``policy.max_future_offset > 0``) also take ``future_state [B, S]``, the raw state
        at the frame where each chunk starts (VLASH offset augmentation); omitted, it is the observed state.

        Returns:
            ``{"flow": loss}`` (plus the two shortcut terms for the shortcut objective).
        """
        policy = self.policy
        x1 = policy.action_normalizer(actions.to(self.device))
        obs_n: torch.Tensor | TensorDict
        future_n = None
        if isinstance(policy, VLAPolicy):
            if future_state is not None:
                raise ValueError("VLA policies have no future-state input; train without max_future_offset.")
            assert isinstance(obs, TensorDict), "a VLA policy takes its observation groups as a TensorDict [B]"
            obs_n = policy.normalize_inputs(obs.to(self.device))
        else:
            assert isinstance(obs, torch.Tensor), "a state-only flow policy takes an observation tensor [B, D]"
            obs_n = policy.obs_normalizer(obs.to(self.device))
            future_n = None if future_state is None else policy.normalize_future_state(future_state.to(self.device))
            if future_n is not None and policy.max_future_offset == 0:
                raise ValueError("future_state was given but the policy has no future-state input (max_future_offset).")
        stats: dict[str, torch.Tensor] = {}
        if policy.cfg.objective == "shortcut":
            loss, stats = shortcut_loss(
                policy,
                obs_n,
                x1,
                self.cfg.bootstrap_fraction,
                self.cfg.min_step_log2,
                target=self.ema.model,
                future_n=future_n,
            )
        else:
            loss = rectified_flow_loss(policy, obs_n, x1, future_n=future_n)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(policy.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.ema.update(policy)
        out = {"flow": float(loss.detach()), "grad_norm": float(grad_norm)}
        out.update({k: float(v) for k, v in stats.items()})
        return out

    def state_dict(self) -> dict:
        """Policy, EMA copy and optimizer."""
        return {
            "policy": self.policy.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.policy.load_state_dict(state["policy"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
