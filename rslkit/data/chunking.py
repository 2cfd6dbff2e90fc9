"""Training samples with action chunking: ``(observation_t, actions_t..t+Ta-1)`` that never cross an episode end."""

from __future__ import annotations

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


class ChunkDataset:
    """In-memory sampler of ``(obs [D], action chunk [Ta, A], pad mask [Ta])`` training examples.

    Args:
        demos: frames and episode bounds (rows must be stored episode by episode, as the reader returns them).
        horizon: action chunk length ``Ta``.
        device: where sampled batches live.
    """

    def __init__(self, demos: Demonstrations, horizon: int, device: str | torch.device = "cpu") -> None:
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
