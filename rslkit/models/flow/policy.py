"""Flow-matching action-chunk policy: normalizers, velocity network and the deterministic Euler sampler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn

from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY
from rslkit.data.normalizer import MinMaxNormalizer
from rslkit.models.flow.objectives import uniform_time
from rslkit.models.flow.sampler import euler_sample
from rslkit.models.flow.velocity_net import VelocityNet
from rslkit.utils.validation import expect


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
    max_future_offset: int = 0
    """``D`` of VLASH future-state conditioning: > 0 gives the policy a second input, the robot state expected when
    its chunk starts, and trains it with random offsets ``delta`` in ``0..D`` (target ``a_{t+delta:}``, state
    ``s_{t+delta}``, observation at ``t``). Deployment refuses inference delays above ``D`` ticks. 0: off."""
    future_state_slice: tuple[int, ...] = ()
    """``(start, stop)``: the observation columns holding the robot state (e.g. ``0,5``: joint positions, in the
    units of absolute joint-target actions). Required when ``max_future_offset > 0``."""
    future_state_source: Literal["observation", "action"] = "observation"
    """Training target of the future state at offset ``delta > 0``: the measured ``s_{t+delta}`` or the last
    commanded absolute target ``a_{t+delta-1}`` (what deployment rolls forward to; use it when servos lag)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for an architecture that cannot be built."""
        for name in ("horizon", "num_inference_steps", "hidden_dim"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        blocks = self.num_blocks
        expect(isinstance(blocks, int) and blocks >= 0, "num_blocks", f"must be an integer >= 0, got {blocks}")
        emb = self.time_embed_dim
        expect(
            isinstance(emb, int) and emb >= 2 and emb % 2 == 0, "time_embed_dim", f"must be even and >= 2, got {emb}"
        )
        objective = self.objective
        expect(
            objective in ("rectified_flow", "shortcut"),
            "objective",
            f"must be 'rectified_flow' or 'shortcut', got {objective!r}",
        )
        expect(bool(self.obs_group), "obs_group", "must name an observation group (e.g. policy)")
        offset, bounds = self.max_future_offset, tuple(self.future_state_slice)
        expect(isinstance(offset, int) and offset >= 0, "max_future_offset", f"must be >= 0 (0: off), got {offset}")
        if offset == 0:
            expect(not bounds, "future_state_slice", f"is {bounds} but max_future_offset is 0; set both or neither")
        else:
            expect(
                len(bounds) == 2 and all(isinstance(b, int) for b in bounds) and 0 <= bounds[0] < bounds[1],
                "future_state_slice",
                f"must be (start, stop) with 0 <= start < stop when max_future_offset > 0, got {bounds}",
            )
        source = self.future_state_source
        expect(
            source in ("observation", "action"),
            "future_state_source",
            f"must be 'observation' or 'action', got {source!r}",
        )


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
        self.state_slice = future_state_slice(cfg, obs_dim)
        """Observation columns of the robot state (None: no future-state input)."""
        self.future_state_dim = 0 if self.state_slice is None else self.state_slice.stop - self.state_slice.start
        self.obs_normalizer = MinMaxNormalizer(obs_dim)
        self.action_normalizer = MinMaxNormalizer(action_dim)
        self.net = VelocityNet(
            obs_dim + self.future_state_dim,
            cfg.horizon,
            action_dim,
            cfg.hidden_dim,
            cfg.num_blocks,
            cfg.time_embed_dim,
            step_conditioned=cfg.objective == "shortcut",
        )

    def sample_time(
        self, batch: int, generator: torch.Generator | None = None, device: torch.device | None = None
    ) -> torch.Tensor:
        """Training times of the flow loss ``[B]``: uniform on [0, 1]."""
        return uniform_time(batch, generator, device)

    @property
    def step_conditioned(self) -> bool:
        """Whether the velocity net takes the step size ``d`` (shortcut model)."""
        return self.net.step_conditioned

    def set_normalization(self, stats: dict[str, dict[str, list]]) -> None:
        """Take min/max of ``observation.state`` and ``action`` from ``meta/stats.json`` content."""
        self.obs_normalizer.set_stats(torch.tensor(stats[OBS_KEY]["min"]), torch.tensor(stats[OBS_KEY]["max"]))
        self.action_normalizer.set_stats(torch.tensor(stats[ACTION_KEY]["min"]), torch.tensor(stats[ACTION_KEY]["max"]))

    @property
    def max_future_offset(self) -> int:
        """``D``: the largest future-state offset seen in training (0: no future-state input)."""
        return self.cfg.max_future_offset if self.state_slice is not None else 0

    def normalize_future_state(self, future_state: torch.Tensor) -> torch.Tensor:
        """Raw future state ``[B, S]`` -> normalized, with the statistics of the observation's state columns.

        Raises:
            ValueError: for a policy without a future-state input.
        """
        if self.state_slice is None:
            raise ValueError("This flow policy has no future-state input; set policy.max_future_offset > 0.")
        s = self.state_slice
        return (future_state - self.obs_normalizer.center[s]) / self.obs_normalizer.half_range[s]

    def conditioning(self, obs_n: torch.Tensor, future_n: torch.Tensor | None = None) -> torch.Tensor:
        """What the velocity net is conditioned on: ``obs_n [B, D]``, with the normalized future state ``future_n
        [B, S]`` appended for future-state policies (default: the observed state, i.e. offset 0).

        Raises:
            ValueError: when ``future_n`` is given to a policy without a future-state input.
        """
        if self.state_slice is None:
            if future_n is not None:
                raise ValueError("This flow policy has no future-state input; set policy.max_future_offset > 0.")
            return obs_n
        if future_n is None:
            future_n = obs_n[:, self.state_slice]
        return torch.cat((obs_n, future_n), dim=-1)

    def velocity(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        obs_n: torch.Tensor,
        num_steps: int | None = None,
        future_n: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``v(x [B, Ta, A], t [B], obs_n [B, D][, future_n [B, S]])`` for a chain of ``num_steps`` (sets ``d =
        1/K`` for shortcut models; flow-matching models ignore it)."""
        d = None
        if self.step_conditioned:
            k = num_steps or self.cfg.num_inference_steps
            d = torch.full_like(t, 1.0 / k)
        return self.net(x, t, self.conditioning(obs_n, future_n), d)

    # ---------------------------------------------------------------- ReinFlow's noisy chain (ChainPolicy)
    @property
    def noise_feature_dim(self) -> int:
        """Size of what ReinFlow's noise net reads: the normalized observation ``D``."""
        return self.obs_dim

    def chain_context(self, obs_n: torch.Tensor) -> torch.Tensor:
        """The context of a noisy chain: the normalized observation ``[B, D]`` itself."""
        return obs_n

    def chain_velocity(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, num_steps: int) -> torch.Tensor:
        """:meth:`velocity` at the observed state (no future-state offset)."""
        return self.velocity(x, t, context, num_steps)

    def noise_features(self, context: torch.Tensor) -> torch.Tensor:
        """The noise net reads the normalized observation ``[B, D]``."""
        return context

    def sample_normalized(
        self,
        obs_n: torch.Tensor,
        x0: torch.Tensor | None = None,
        num_steps: int | None = None,
        future_n: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Deterministic Euler ODE from ``x0 ~ N(0, I)`` (or the given ``x0 [B, Ta, A]``): normalized chunk."""
        k = num_steps or self.cfg.num_inference_steps
        if x0 is None:
            x0 = torch.randn(obs_n.shape[0], self.horizon, self.action_dim, device=obs_n.device)
        return euler_sample(lambda x, t: self.velocity(x, t, obs_n, k, future_n), x0, k)

    def act_chunk(
        self,
        obs: torch.Tensor,
        x0: torch.Tensor | None = None,
        num_steps: int | None = None,
        future_state: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Env-unit action chunk ``[N, Ta, A]`` for raw observations ``obs [N, D]`` and, for future-state policies,
        the raw state ``future_state [N, S]`` expected when the chunk starts (default: the observed state)."""
        future_n = None if future_state is None else self.normalize_future_state(future_state)
        chunk = self.sample_normalized(self.obs_normalizer(obs), x0, num_steps, future_n)
        return self.action_normalizer.unnormalize(chunk.clamp(-1.0, 1.0))


def future_state_slice(cfg: FlowPolicyCfg, obs_dim: int) -> slice | None:
    """The observation columns of the future state from ``cfg`` (None when ``max_future_offset == 0``).

    Raises:
        ValueError: for a negative offset range, a missing or malformed slice, or a slice without an offset range.
    """
    if cfg.max_future_offset < 0:
        raise ValueError(f"max_future_offset must be >= 0, got {cfg.max_future_offset}.")
    if cfg.max_future_offset == 0:
        if cfg.future_state_slice:
            raise ValueError(
                "future_state_slice is set but max_future_offset is 0; set agent.policy.max_future_offset D > 0 "
                "(e.g. 8) to train with future-state offsets, or clear future_state_slice."
            )
        return None
    bounds = tuple(cfg.future_state_slice)
    if len(bounds) != 2 or not 0 <= bounds[0] < bounds[1] <= obs_dim:
        raise ValueError(
            f"future_state_slice must be (start, stop) with 0 <= start < stop <= {obs_dim} (the observation size), "
            f"got {bounds}; e.g. --agent.policy.future_state_slice 0,5 for the first five observation entries."
        )
    return slice(int(bounds[0]), int(bounds[1]))
