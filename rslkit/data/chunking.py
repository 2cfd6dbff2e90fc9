"""Training samples with action chunking: ``(observation_t, actions_t..t+Ta-1)`` that never cross an episode end.

With future-state offsets (VLASH, arXiv 2512.01031) a sample is ``(observation_t, state_{t+delta},
actions_{t+delta..t+delta+Ta-1})`` for a random ``delta`` in ``0..D``: the policy learns to plan from the state the
robot will be in once the actions still executing while it thinks have run.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from rslkit.data.demonstrations import Demonstrations


def chunk_indices(episode_from: torch.Tensor, episode_to: torch.Tensor, horizon: int) -> torch.Tensor:
    """Row indices of the action chunk of every frame.

    The chunk of frame ``t`` of an episode covering rows ``[s, e)`` is rows ``t, t+1, ..., t+Ta-1`` clamped to
    ``e - 1``: near the end of an episode the chunk is padded by repeating the episode's last action, as LeRobot
    (``action_is_pad`` + edge padding) and diffusion policy do. A chunk never contains actions of the next episode,
    and holding the last action is a feasible continuation for the policy to imitate.

    Args:
        episode_from, episode_to: ``[E]`` row ranges (end exclusive).
        horizon: chunk length ``Ta >= 1``.

    Returns:
        ``[F, Ta]`` int64 row indices.
    """
    if horizon < 1:
        raise ValueError(f"The action chunk length (horizon) must be >= 1, got {horizon}.")
    lengths = episode_to - episode_from
    rows = torch.arange(int(lengths.sum()), dtype=torch.long)
    last = torch.repeat_interleave(episode_to - 1, lengths)
    offsets = torch.arange(horizon, dtype=torch.long)
    return torch.minimum(rows.unsqueeze(1) + offsets, last.unsqueeze(1))


class OffsetBatch(NamedTuple):
    """A batch of future-state offset examples (see :meth:`ChunkDataset.sample_offset`)."""

    obs: torch.Tensor
    """``[B, D]`` observations at ``t``."""
    future_state: torch.Tensor
    """``[B, S]`` state at ``t + delta`` (see ``future_state_source``)."""
    actions: torch.Tensor
    """``[B, Ta, A]`` action chunk starting at ``t + delta``."""
    is_pad: torch.Tensor
    """``[B, Ta]`` True where the chunk repeats the episode's last action."""
    offsets: torch.Tensor
    """``[B]`` int64 ``delta``."""


class ChunkDataset:
    """In-memory sampler of ``(obs [D], action chunk [Ta, A], pad mask [Ta])`` training examples.

    Args:
        demos: frames and episode bounds (rows must be stored episode by episode, as the reader returns them).
        horizon: action chunk length ``Ta``.
        device: where sampled batches live.
        max_offset: ``D`` of future-state offset sampling (:meth:`sample_offset`); 0 disables it.
        state_slice: columns of the observation holding the robot state (needed when ``max_offset > 0``).
        future_state_source: what the future state at ``delta > 0`` is: ``observation`` (the measured state
            ``s_{t+delta}``) or ``action`` (the last commanded absolute target ``a_{t+delta-1}``, exactly what
            deployment rolls the state forward to; for robots whose servos lag their targets). ``delta = 0`` is
            always the observed state.
    """

    def __init__(
        self,
        demos: Demonstrations,
        horizon: int,
        device: str | torch.device = "cpu",
        max_offset: int = 0,
        state_slice: slice | None = None,
        future_state_source: Literal["observation", "action"] = "observation",
    ) -> None:
        frm, to = demos.episode_from, demos.episode_to
        if frm.numel() == 0 or int(frm[0]) != 0 or not torch.equal(frm[1:], to[:-1]) or int(to[-1]) != demos.num_frames:
            raise ValueError(
                "Demonstrations must store their episodes back to back covering every frame; load them "
                "with rslkit.data.read_lerobot_dataset."
            )
        self.demos = demos
        self.horizon = horizon
        self.device = torch.device(device)
        self.observations = demos.observations.to(self.device)
        self.actions = demos.actions.to(self.device)
        self.index = chunk_indices(demos.episode_from, demos.episode_to, horizon).to(self.device)
        rows = torch.arange(self.index.shape[0], device=self.device).unsqueeze(1)
        self.is_pad = self.index < rows + torch.arange(horizon, device=self.device)
        """``[F, Ta]`` True where the chunk repeats the episode's last action."""
        if max_offset < 0:
            raise ValueError(f"max_offset (the future-state offset range D) must be >= 0, got {max_offset}.")
        if max_offset > 0 and state_slice is None:
            raise ValueError("Future-state offsets need state_slice: the observation columns holding the state.")
        if state_slice is not None and len(range(demos.obs_dim)[state_slice]) == 0:
            raise ValueError(f"state_slice {state_slice} selects no column of the {demos.obs_dim} observation dims.")
        if future_state_source not in ("observation", "action"):
            raise ValueError(f"future_state_source must be 'observation' or 'action', got '{future_state_source}'.")
        if future_state_source == "action" and state_slice is not None:
            width = len(range(demos.obs_dim)[state_slice])
            if width != demos.action_dim:
                raise ValueError(
                    f"future_state_source 'action' needs a state slice as wide as the action ({demos.action_dim}), "
                    f"got {width} columns."
                )
        self.max_offset, self.state_slice, self.future_state_source = max_offset, state_slice, future_state_source
        lengths = demos.episode_to - demos.episode_from
        self.last_row = torch.repeat_interleave(demos.episode_to - 1, lengths).to(self.device)
        """``[F]`` last row of each frame's episode."""

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def get(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Examples of the frames ``rows [B]``: ``(obs [B, D], actions [B, Ta, A], is_pad [B, Ta])``."""
        rows = rows.to(self.device)
        return self.observations[rows], self.actions[self.index[rows]], self.is_pad[rows]

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` examples drawn uniformly with replacement (see :meth:`get`)."""
        device = generator.device if generator is not None else self.device
        return self.get(torch.randint(len(self), (batch_size,), generator=generator, device=device))

    def get_offset(self, rows: torch.Tensor, offsets: torch.Tensor) -> OffsetBatch:
        """Offset examples of frames ``rows [B]`` with ``offsets [B]``: ``t + delta`` must stay in the episode.

        Raises:
            ValueError: when the dataset has no state slice or an offset crosses the episode end.
        """
        if self.state_slice is None:
            raise ValueError("This ChunkDataset has no state_slice; build it with max_offset > 0 and state_slice.")
        rows, offsets = rows.to(self.device), offsets.to(self.device)
        shifted = rows + offsets
        if bool((offsets < 0).any()) or bool((shifted > self.last_row[rows]).any()):
            raise ValueError("Offsets must be >= 0 and keep t + delta inside the frame's episode.")
        future = self.observations[shifted][:, self.state_slice]
        if self.future_state_source == "action":  # a_{t+delta-1} where delta > 0
            commanded = self.actions[(shifted - 1).clamp_min(0)]
            future = torch.where((offsets > 0).unsqueeze(1), commanded, self.observations[rows][:, self.state_slice])
        return OffsetBatch(
            self.observations[rows], future, self.actions[self.index[shifted]], self.is_pad[shifted], offsets
        )

    def sample_offset(self, batch_size: int, generator: torch.Generator | None = None) -> OffsetBatch:
        """``batch_size`` frames drawn uniformly with replacement, each with ``delta`` uniform in
        ``0..min(D, frames left in its episode)`` (so ``t + delta`` never leaves the episode)."""
        device = generator.device if generator is not None else self.device
        rows = torch.randint(len(self), (batch_size,), generator=generator, device=device).to(self.device)
        room = torch.clamp(self.last_row[rows] - rows, max=self.max_offset)
        u = torch.rand(batch_size, generator=generator, device=device).to(self.device)
        offsets = torch.minimum((u * (room + 1).float()).long(), room)
        return self.get_offset(rows, offsets)
