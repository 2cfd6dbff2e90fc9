"""Training examples of VLA-style policies: state, camera frames and instruction of a frame, and its action chunk.

Also the image augmentation they train with: random shifts (pad by replicating the border, crop back; DrQ, Kostrikov
et al. 2020; Diffusion Policy's random crop plays the same role).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rslkit.data.chunking import chunk_indices
from rslkit.data.demonstrations import Demonstrations


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image ``[B, H, W, C]`` (any dtype) by an integer offset in ``[-pad, pad]`` along each axis, the
    border replicated into the gap; ``pad = 0`` returns the images unchanged."""
    if pad <= 0:
        return images
    b, h, w = images.shape[:3]
    shift = torch.randint(-pad, pad + 1, (b, 2), generator=generator).to(images.device)
    rows = (torch.arange(h, device=images.device) + shift[:, :1]).clamp(0, h - 1)  # [B, H]
    cols = (torch.arange(w, device=images.device) + shift[:, 1:]).clamp(0, w - 1)  # [B, W]
    batch = torch.arange(b, device=images.device).view(b, 1, 1)
    return images[batch, rows.view(b, h, 1), cols.view(b, 1, w)]


class VLAChunkDataset:
    """In-memory sampler of ``(state [S], frames {camera: [H, W, 3] uint8}, task index, action chunk [Ta, A])``.

    Args:
        demos: frames with the cameras loaded (``read_lerobot_dataset(root, cameras=...)``) and tasks.
        cameras: the cameras the policy reads.
        horizon: action chunk length ``Ta`` (chunks repeat the episode's last action past its end).

    Raises:
        ValueError: a camera that was not loaded, or a dataset without tasks (no instructions to learn from).
    """

    def __init__(self, demos: Demonstrations, cameras: Sequence[str], horizon: int) -> None:
        missing = [c for c in cameras if c not in demos.images]
        if missing:
            raise ValueError(
                f"The policy reads cameras {list(cameras)} but {missing} were not loaded (the dataset has "
                f"{demos.available_cameras}); record them with `python -m rslkit.record --camera NAME`."
            )
        if demos.task_index is None or not demos.tasks:
            raise ValueError(
                "This dataset has no tasks (meta/tasks.parquet): a language-conditioned policy needs each episode's "
                "instruction; record with --goal or from a task that draws instructions."
            )
        self.demos = demos
        self.cameras = tuple(cameras)
        self.horizon = horizon
        self.index = chunk_indices(demos.episode_from, demos.episode_to, horizon)
        self.task_index = demos.task_index

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def get(self, rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """Examples of the frames ``rows [B]``: ``(state [B, S], {camera: [B, H, W, 3]}, task index [B], actions
        [B, Ta, A])``."""
        d = self.demos
        frames = {c: d.images[c][rows] for c in self.cameras}
        return d.observations[rows], frames, self.task_index[rows], d.actions[self.index[rows]]
