"""In-memory demonstrations: episodes of observations and actions (the content of a LeRobotDataset)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rslkit.data.lerobot_cameras import check_frames

OBS_KEY = "observation.state"
"""LeRobot feature name of the (proprioceptive) observation vector."""
ACTION_KEY = "action"
"""LeRobot feature name of the action vector."""
REWARD_KEY = "next.reward"
"""Reward received after the frame's action (LeRobot's optional ``next.*`` features)."""
DONE_KEY = "next.done"
"""Whether the frame's action ended the episode."""
SUCCESS_KEY = "next.success"
"""Whether the task counted as solved after the frame's action (the env's ``extras["success"]``; LeRobot's name)."""
ENV_STATE_KEY = "observation.environment_state"
"""LeRobot feature name of privileged simulator state (object poses, contacts): not a policy input, an auxiliary
training target (e.g. :class:`~rslkit.models.vla.state_probe.StateProbe`)."""


@dataclass
class Episode:
    """One recorded episode.

    Attributes:
        observations: ``[T, D]`` observation before each action.
        actions: ``[T, A]`` action executed at each frame.
        rewards: ``[T]`` reward of each action, or None.
        dones: ``[T]`` bool, True where the action ended the episode (usually only the last frame), or None.
        task: the language goal of the episode (stored in LeRobot's ``meta/tasks.parquet``).
        images: ``{camera name: [T, H, W, 3] uint8}`` RGB frame seen with each observation (camera ``front`` is
            the dataset feature ``observation.images.front``); empty for state-only episodes.
        env_state: ``[T, E]`` privileged simulator state with each observation (``observation.environment_state``),
            or None.
        successes: ``[T]`` bool, True where the task counted as solved after the action (``next.success``), or None.
        states: the simulator's exact state before each action (``env.env_state(i)``, for return-and-explore
            start states); kept in memory only, never written.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor | None = None
    dones: torch.Tensor | None = None
    task: str = ""
    images: dict[str, torch.Tensor] = field(default_factory=dict)
    env_state: torch.Tensor | None = None
    successes: torch.Tensor | None = None
    states: list[Any] | None = None

    def __post_init__(self) -> None:
        t = self.observations.shape[0]
        if self.observations.dim() != 2 or self.actions.dim() != 2 or self.actions.shape[0] != t or t == 0:
            raise ValueError(
                f"An episode needs observations [T, D] and actions [T, A] with the same T >= 1, got "
                f"{list(self.observations.shape)} and {list(self.actions.shape)}."
            )
        for name in ("rewards", "dones", "successes"):
            value = getattr(self, name)
            if value is not None and value.shape != (t,):
                raise ValueError(f"Episode {name} must have shape [{t}], got {list(value.shape)}.")
        for camera, frames in self.images.items():
            check_frames(camera, frames, t)
        if self.env_state is not None and (self.env_state.dim() != 2 or self.env_state.shape[0] != t):
            raise ValueError(f"Episode env_state must have shape [{t}, E], got {list(self.env_state.shape)}.")

    def __len__(self) -> int:
        return int(self.observations.shape[0])

    @property
    def succeeded(self) -> bool | None:
        """Whether the task counted as solved at the episode's end (None when unknown)."""
        return None if self.successes is None else bool(self.successes[-1])


@dataclass
class Demonstrations:
    """All frames of a dataset, episodes stored back to back (frame ``i`` of the file is row ``i``).

    Attributes:
        observations: ``[F, D]`` float32.
        actions: ``[F, A]`` float32.
        episode_index: ``[F]`` int64 episode of each frame.
        episode_from: ``[E]`` first row of each episode; ``episode_to``: ``[E]`` one past its last row.
        rewards: ``[F]`` or None; dones: ``[F]`` bool or None.
        stats: ``meta/stats.json`` content ``{feature: {stat: list}}``.
        fps: frames per second of the recording.
        tasks: task strings (language goals) by ``task_index``.
        info: ``meta/info.json`` content.
        task_index: ``[F]`` int64 task of each frame (an index into ``tasks``), or None.
        images: ``{camera name: [F, H, W, 3] uint8}`` for the cameras the reader was asked for (all in memory:
            ``F * H * W * 3`` bytes per camera); empty when none was asked for.
        available_cameras: every camera the dataset has (image and video features), loaded or not.
        env_state: ``[F, E]`` float32 ``observation.environment_state`` (privileged simulator state), or None.
        successes: ``[F]`` bool ``next.success``, or None.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    episode_index: torch.Tensor
    episode_from: torch.Tensor
    episode_to: torch.Tensor
    rewards: torch.Tensor | None = None
    dones: torch.Tensor | None = None
    stats: dict[str, dict[str, list]] = field(default_factory=dict)
    fps: int = 0
    tasks: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    task_index: torch.Tensor | None = None
    images: dict[str, torch.Tensor] = field(default_factory=dict)
    available_cameras: list[str] = field(default_factory=list)
    env_state: torch.Tensor | None = None
    successes: torch.Tensor | None = None

    @property
    def num_episodes(self) -> int:
        """Number of episodes ``E``."""
        return int(self.episode_from.numel())

    @property
    def num_frames(self) -> int:
        """Number of frames ``F``."""
        return int(self.observations.shape[0])

    @property
    def obs_dim(self) -> int:
        """Observation size ``D``."""
        return int(self.observations.shape[1])

    @property
    def action_dim(self) -> int:
        """Action size ``A``."""
        return int(self.actions.shape[1])

    def episode_returns(self) -> torch.Tensor:
        """Undiscounted return of each episode ``[E]``.

        Raises:
            ValueError: when the dataset has no ``next.reward`` feature.
        """
        if self.rewards is None:
            raise ValueError(
                f"This dataset has no '{REWARD_KEY}' feature; record it with .venv/bin/python -m rslkit.record."
            )
        sums = torch.zeros(self.num_episodes, dtype=torch.float64)
        rows = torch.repeat_interleave(torch.arange(self.num_episodes), self.episode_to - self.episode_from)
        return sums.index_add_(0, rows, self.rewards.double()).float()

    def to_episodes(self, rewards: torch.Tensor | None = None) -> list[Episode]:
        """The dataset as :class:`Episode` s again (with the loaded cameras), e.g. to write it with new rewards.

        Args:
            rewards: ``[F]`` rewards to store instead of the dataset's ``next.reward`` (None: keep those).
        """
        rewards = self.rewards if rewards is None else rewards
        out = []
        for a, b in zip(self.episode_from.tolist(), self.episode_to.tolist()):
            task = self.tasks[int(self.task_index[a])] if self.task_index is not None and self.tasks else ""
            out.append(
                Episode(
                    observations=self.observations[a:b],
                    actions=self.actions[a:b],
                    rewards=None if rewards is None else rewards[a:b],
                    dones=None if self.dones is None else self.dones[a:b],
                    task=task,
                    images={name: frames[a:b] for name, frames in self.images.items()},
                    env_state=None if self.env_state is None else self.env_state[a:b],
                    successes=None if self.successes is None else self.successes[a:b],
                )
            )
        return out
