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
from rslkit.models.vla.state_probe import StateProbe
from rslkit.utils.validation import expect, finite


@dataclass
class FlowBCCfg:
    """Optimization of the flow-matching loss. CLI: ``--agent.algorithm.<field>``."""

    learning_rate: float = 1e-3
    weight_decay: float = 1e-6
    optimizer_betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's ``(beta1, beta2)`` (LeRobot's name; SmolVLA fine-tunes with ``0.9,0.95``)."""
    optimizer_eps: float = 1e-8
    """AdamW's ``eps``."""
    batch_size: int = 256
    max_grad_norm: float = 1.0
    ema_decay: float = 0.995
    """Decay of the weight average used for evaluation, checkpoints' deployed policy and ReinFlow's start."""
    bootstrap_fraction: float = 0.25
    """Shortcut objective: share of each batch trained on self-consistency targets."""
    min_step_log2: int = 7
    """Shortcut objective: smallest step size ``2^-min_step_log2``."""
    aux_state_coef: float = 1.0
    """Weight of the auxiliary state loss when a :class:`~rslkit.models.vla.state_probe.StateProbe` is given
    (VLA runs with ``--agent.aux_state``): ``L = L_flow + c * |probe(tokens) - s_env|^2``."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field behaviour cloning cannot run with."""
        for name in ("learning_rate", "max_grad_norm"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        wd = self.weight_decay
        expect(finite(wd) and wd >= 0, "weight_decay", f"must be a finite number >= 0, got {wd}")
        betas = tuple(self.optimizer_betas)
        expect(
            len(betas) == 2 and all(finite(b) and 0 <= b < 1 for b in betas),
            "optimizer_betas",
            f"must be two numbers in [0, 1), e.g. 0.9,0.95; got {self.optimizer_betas}",
        )
        eps = self.optimizer_eps
        expect(finite(eps) and eps > 0, "optimizer_eps", f"must be a finite number > 0, got {eps}")
        batch = self.batch_size
        expect(isinstance(batch, int) and batch >= 2, "batch_size", f"must be an integer >= 2, got {batch}")
        expect(
            finite(self.ema_decay) and 0 <= self.ema_decay < 1, "ema_decay", f"must be in [0, 1), got {self.ema_decay}"
        )
        frac = self.bootstrap_fraction
        expect(finite(frac) and 0 <= frac <= 1, "bootstrap_fraction", f"must be in [0, 1], got {frac}")
        log2 = self.min_step_log2
        expect(isinstance(log2, int) and log2 >= 1, "min_step_log2", f"must be an integer >= 1, got {log2}")
        coef = self.aux_state_coef
        expect(finite(coef) and coef >= 0, "aux_state_coef", f"must be a finite number >= 0, got {coef}")


P = TypeVar("P", FlowPolicy, VLAPolicy)


class FlowBC(Generic[P]):
    """Fits a :class:`~rslkit.models.flow.FlowPolicy` (or a :class:`~rslkit.models.vla.VLAPolicy`) to demonstrated
    action chunks.

    The loss follows ``policy.cfg.objective``: ``rectified_flow`` (``|v(x_t, t, o) - (x1 - x0)|^2``) or ``shortcut``
    (flow matching at ``d = 0`` plus self-consistency targets from the EMA model).

    With a ``probe`` (VLA policies, rectified flow) the observation tokens also regress privileged simulator state:
    ``L = L_flow + aux_state_coef * |probe(tokens) - s_env|^2`` (:mod:`rslkit.models.vla.state_probe`).

    Args:
        policy: the policy (its normalizers must hold the dataset statistics).
        cfg: optimization settings.
        device: training device.
        probe: auxiliary state probe trained with the policy (its normalizer must hold the state's statistics).

    Raises:
        ValueError: a probe with a state-only policy or with the shortcut objective.
    """

    def __init__(
        self, policy: P, cfg: FlowBCCfg, device: str | torch.device = "cpu", probe: StateProbe | None = None
    ) -> None:
        if cfg.batch_size < 2:
            raise ValueError(f"batch_size must be >= 2, got {cfg.batch_size}.")
        if probe is not None and (not isinstance(policy, VLAPolicy) or policy.cfg.objective != "rectified_flow"):
            raise ValueError(
                "An auxiliary state probe reads a VLA policy's observation tokens under the rectified_flow objective; "
                "turn the probe off with --agent.aux_state= or set --agent.policy.objective rectified_flow."
            )
        self.cfg = cfg
        self.device = torch.device(device)
        self.policy: P = policy.to(self.device)
        self.probe: StateProbe | None = None if probe is None else probe.to(self.device)
        params = [*policy.parameters(), *([] if probe is None else probe.parameters())]
        beta1, beta2 = cfg.optimizer_betas
        self.optimizer = torch.optim.AdamW(
            params,
            lr=cfg.learning_rate,
            betas=(beta1, beta2),
            eps=cfg.optimizer_eps,
            weight_decay=cfg.weight_decay,
            fused=True,
        )
        self.ema: EMA[P] = EMA(policy, cfg.ema_decay)

    def update(
        self,
        obs: torch.Tensor | TensorDict,
        actions: torch.Tensor,
        future_state: torch.Tensor | None = None,
        aux_state: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One gradient step on a batch of raw observations ``[B, D]`` (a VLA policy: its raw observation groups
        ``[B]``) and action chunks ``[B, Ta, A]``.

        Future-state policies (``policy.max_future_offset > 0``) also take ``future_state [B, S]``, the raw state
        at the frame where each chunk starts (VLASH offset augmentation); omitted, it is the observed state.

        With a probe, ``aux_state [B, E]`` is the raw privileged state of each frame.

        Returns:
            ``{"flow": loss}`` (plus the two shortcut terms for the shortcut objective, ``aux_state`` with a probe).
        """
        if (aux_state is None) != (self.probe is None):
            raise ValueError("Pass aux_state exactly when FlowBC has a state probe (and then for every batch).")
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
        elif self.probe is not None:
            assert aux_state is not None
            tokens = policy.conditioning(obs_n)  # read by both losses: the CNN runs once
            loss = rectified_flow_loss(policy, obs_n, x1, conditioning=tokens)
            stats["aux_state"] = self.probe.loss(tokens, aux_state.to(self.device))
        else:
            loss = rectified_flow_loss(policy, obs_n, x1, future_n=future_n)
        total = loss + self.cfg.aux_state_coef * stats["aux_state"] if "aux_state" in stats else loss
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.optimizer.param_groups[0]["params"], self.cfg.max_grad_norm)
        self.optimizer.step()
        self.ema.update(policy)
        out = {"flow": float(loss.detach()), "grad_norm": float(grad_norm)}
        out.update({k: float(v.detach()) for k, v in stats.items()})
        return out

    def state_dict(self) -> dict:
        """Policy, EMA copy and optimizer."""
        state = {
            "policy": self.policy.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }
        if self.probe is not None:
            state["probe"] = self.probe.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.policy.load_state_dict(state["policy"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.probe is not None:
            if "probe" not in state:
                raise ValueError("This checkpoint has no state probe; resume it without --agent.aux_state.")
            self.probe.load_state_dict(state["probe"])
