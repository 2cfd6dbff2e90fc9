"""Demonstrations (LeRobotDataset v3, read by :mod:`rslkit.data`) as :class:`~rslkit.rewards.pairs.ProgressData`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict

from rslkit.data.demonstrations import Demonstrations
from rslkit.envs.camera_groups import camera_group
from rslkit.rewards.pairs import ProgressData


def episode_goals(demos: Demonstrations, goal: str | None = None) -> list[str]:
    """The language goal of each episode: its task string (``meta/tasks.parquet``), or ``goal`` for all.

    Raises:
        ValueError: the dataset has no task strings and no ``goal`` is given.
    """
    if goal is not None:
        return [goal] * len(demos.episode_from)
    if demos.task_index is None or not demos.tasks:
        raise ValueError("The dataset has no task strings (meta/tasks.parquet); pass the goal: --goal 'lift the cube'.")
    return [demos.tasks[int(demos.task_index[int(start)])] for start in demos.episode_from]


def progress_data(
    demos: Demonstrations,
    cameras: Sequence[str],
    state_group: str | None = None,
    goal: str | None = None,
    failed_episodes: Sequence[int] = (),
) -> ProgressData:
    """Frames of ``demos`` as the groups a critic reads: ``camera_<name>`` from the dataset's camera ``name`` and,
    with ``state_group``, ``observation.state`` under that name.

    Args:
        demos: demonstrations read with the cameras loaded.
        cameras: bare camera names.
        state_group: observation group name the state is stored under (the env's, e.g. ``policy``), or None.
        goal: one goal for every episode (datasets without task strings).
        failed_episodes: positions (0-based, in dataset order) of episodes that did not reach the goal.

    Raises:
        ValueError: a camera the demonstrations lack (lists those they hold), or a bad episode position.
    """
    groups: dict[str, torch.Tensor] = {}
    for name in cameras:
        if name not in demos.images:
            raise ValueError(
                f"The demonstrations hold no camera '{name}' (loaded: {sorted(demos.images)}); read the dataset "
                f"with that camera, or record it with `python -m rslkit.record --camera {name}`."
            )
        groups[camera_group(name)] = demos.images[name]
    if state_group is not None:
        groups[state_group] = demos.observations.float()
    n_frames = int(demos.observations.shape[0])
    success = torch.ones(len(demos.episode_from), dtype=torch.bool)
    for e in failed_episodes:
        if not 0 <= e < len(success):
            raise ValueError(f"Failed episode {e} is out of range: the dataset has {len(success)} episodes.")
        success[e] = False
    return ProgressData(
        frames=TensorDict(groups, [n_frames]),
        starts=demos.episode_from.clone(),
        ends=demos.episode_to.clone(),
        goals=episode_goals(demos, goal),
        success=success,
    )


def concat_progress_data(parts: Sequence[ProgressData]) -> ProgressData:
    """Several datasets as one (same groups and shapes)."""
    if len(parts) == 1:
        return parts[0]
    offsets = torch.tensor([0, *[int(p.frames.batch_size[0]) for p in parts]]).cumsum(0)
    return ProgressData(
        frames=torch.cat([p.frames for p in parts]),  # type: ignore[arg-type]
        starts=torch.cat([p.starts + offsets[k] for k, p in enumerate(parts)]),
        ends=torch.cat([p.ends + offsets[k] for k, p in enumerate(parts)]),
        goals=[g for p in parts for g in p.goals],
        success=torch.cat([p.success for p in parts]),
    )


def split_episodes(data: ProgressData, holdout: float, seed: int = 0) -> tuple[ProgressData, ProgressData | None]:
    """``(train, held_out)``: a random ``holdout`` fraction of the episodes (at least one when > 0) held out."""
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"--holdout must be in [0, 1), got {holdout}.")
    n = data.num_episodes
    k = max(1, round(holdout * n)) if holdout > 0 else 0
    if k >= n:
        raise ValueError(f"Holding out {k} of {n} episodes leaves none to train on; lower --holdout.")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    held = sorted(order[:k].tolist())
    train = sorted(order[k:].tolist())
    return data.subset(train), (data.subset(held) if held else None)
