"""Flow-matching action-chunk policy: normalizers, velocity network and the deterministic Euler sampler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn

from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY
from rslkit.data.normalizer import MinMaxNormalizer
from rslkit.models.flow.sampler import euler_sample
from rslkit.models.flow.velocity_net import VelocityNet


@dataclass
class FlowPolicyCfg:
    """Architecture of a flow policy. CLI: ``--agent.policy.<field>``."""

    horizon: int = 4
    """Action chunk length ``Ta`` (actions executed per decision)."""
    num_inference_steps: int = 4
    """Euler steps ``K`` of the sampler (and of the ReinFlow chain)."""
    hidden_dim: int = 256
    num_blocks: int = 3
    time_embed_dim: int = 32
    objective: Literal["rectified_flow", "shortcut"] = "rectified_flow"
    """``shortcut`` conditions the net on the step size ``d`` (Frans et al. 2024) for few-step sampling."""
    obs_group: str = "policy"
    """Observation group the policy reads (stored as ``observation.state`` in datasets)."""


class FlowPolicy(nn.Module):
    """``pi(A_t | o_t)`` over action chunks ``A_t = [a_t, ..., a_{t+Ta-1}]`` as a flow from ``N(0, I)``.

    Observations and actions are min-max normalized to ``[-1, 1]`` with dataset statistics (buffers, saved with the
    weights). The flow runs in normalized action space; :meth:`act_chunk` clips the sample to ``[-1, 1]`` (the
    data range) and maps it back to env units.

    Args:
        obs_dim: observation size ``D``.
        action_dim: action size ``A``.
        cfg: architecture.
    """

    def __init__(self, obs_dim: int, action_dim: int, cfg: FlowPolicyCfg) -> None:
        super().__init__()
        if cfg.horizon < 1 or cfg.num_inference_steps < 1:
            raise ValueError(
                f"horizon and num_inference_steps must be >= 1, got {cfg.horizon}, {cfg.num_inference_steps}."
            )
        if cfg.objective not in ("rectified_flow", "shortcut"):
            raise ValueError(f"Unknown flow objective '{cfg.objective}'; use 'rectified_flow' or 'shortcut'.")
        self.cfg = cfg
        self.obs_dim, self.action_dim, self.horizon = obs_dim, action_dim, cfg.horizon
        self.obs_normalizer = MinMaxNormalizer(obs_dim)
        self.action_normalizer = MinMaxNormalizer(action_dim)
        self.net = VelocityNet(
            obs_dim,
            cfg.horizon,
            action_dim,
            cfg.hidden_dim,
            cfg.num_blocks,
            cfg.time_embed_dim,
            step_conditioned=cfg.objective == "shortcut",
        )

    @property
    def step_conditioned(self) -> bool:
        """Whether the velocity net takes the step size ``d`` (shortcut model)."""
        return self.net.step_conditioned

    def set_normalization(self, stats: dict[str, dict[str, list]]) -> None:
        """Take min/max of ``observation.state`` and ``action`` from ``meta/stats.json`` content."""
        self.obs_normalizer.set_stats(torch.tensor(stats[OBS_KEY]["min"]), torch.tensor(stats[OBS_KEY]["max"]))
        self.action_normalizer.set_stats(torch.tensor(stats[ACTION_KEY]["min"]), torch.tensor(stats[ACTION_KEY]["max"]))

    def velocity(
        self, x: torch.Tensor, t: torch.Tensor, obs_n: torch.Tensor, num_steps: int | None = None
    ) -> torch.Tensor:
        """``v(x [B, Ta, A], t [B], obs_n [B, D])`` for a chain of ``num_steps`` (sets ``d = 1/K`` for shortcut
        models; flow-matching models ignore it)."""
        d = None
        if self.step_conditioned:
            k = num_steps or self.cfg.num_inference_steps
            d = torch.full_like(t, 1.0 / k)
        return self.net(x, t, obs_n, d)

    def sample_normalized(
        self, obs_n: torch.Tensor, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """Deterministic Euler ODE from ``x0 ~ N(0, I)`` (or the given ``x0 [B, Ta, A]``): normalized chunk."""
        k = num_steps or self.cfg.num_inference_steps
        if x0 is None:
            x0 = torch.randn(obs_n.shape[0], self.horizon, self.action_dim, device=obs_n.device)
        return euler_sample(lambda x, t: self.velocity(x, t, obs_n, k), x0, k)

    def act_chunk(
        self, obs: torch.Tensor, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """Env-unit action chunk ``[N, Ta, A]`` for raw observations ``obs [N, D]``."""
        chunk = self.sample_normalized(self.obs_normalizer(obs), x0, num_steps)
        return self.action_normalizer.unnormalize(chunk.clamp(-1.0, 1.0))
