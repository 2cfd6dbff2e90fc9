"""A training / validation split of demonstrations by whole episodes (frames of one episode are strongly correlated:
a split by frames would validate on near-copies of the training frames)."""

from __future__ import annotations

from dataclasses import replace

import torch

from rslkit.data.demonstrations import Demonstrations


def split_episodes(num_episodes: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Episode indices ``(train, val)``, each sorted: ``round(val_fraction * E)`` episodes (at least one when
    ``val_fraction > 0``) drawn at random with ``seed``, the same for the same seed on any machine.

    Raises:
        ValueError: ``val_fraction`` outside ``[0, 1)``, or a split that leaves no training episode (names
            ``--agent.val_fraction``).
    """
    if not 0 <= val_fraction < 1:
        raise ValueError(f"--agent.val_fraction must be in [0, 1) (0: no validation), got {val_fraction}.")
    num_val = 0 if val_fraction == 0 else max(1, round(val_fraction * num_episodes))
    if num_val >= num_episodes:
        raise ValueError(
            f"--agent.val_fraction {val_fraction} holds out {num_val} of the dataset's {num_episodes} episode(s) and "
            "leaves none to train on: record more episodes or set --agent.val_fraction 0."
        )
    order = torch.randperm(num_episodes, generator=torch.Generator().manual_seed(seed))
    return order[num_val:].sort().values, order[:num_val].sort().values


def select_episodes(demos: Demonstrations, episodes: torch.Tensor) -> Demonstrations:
    """The demonstrations of ``episodes`` (indices into ``demos``' episodes, in the order given), stored back to
    back; every per-frame tensor (cameras included) is copied, statistics, tasks and ``info`` are kept."""
    starts, ends = demos.episode_from[episodes], demos.episode_to[episodes]
    lengths = ends - starts
    rows = torch.cat([torch.arange(int(a), int(b)) for a, b in zip(starts, ends)]) if len(episodes) else starts
    to = torch.cumsum(lengths, 0)

    def take(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x[rows]

    return replace(
        demos,
        observations=demos.observations[rows],
        actions=demos.actions[rows],
        episode_index=demos.episode_index[rows],
        episode_from=to - lengths,
        episode_to=to,
        rewards=take(demos.rewards),
        dones=take(demos.dones),
        task_index=take(demos.task_index),
        images={name: frames[rows] for name, frames in demos.images.items()},
        env_state=take(demos.env_state),
        successes=take(demos.successes),
    )
