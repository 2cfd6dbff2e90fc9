"""What behaviour cloning needs of an env, read from a dataset instead: sizes, names, cameras, instructions and the
control rate of a LeRobotDataset v3.0 (``meta/info.json`` and ``meta/tasks.parquet``).

A :class:`DatasetSpec` stands in for the env of a run trained from a robot's recordings with no simulator
(``train.py --algo vla-bc --dataset DIR``): it has the read side of the :class:`~rslkit.envs.vec_env.VecEnv`
interface (``num_actions``, ``get_observations()`` shapes, ``instructions``, ``step_dt``, ``action_names``,
``observation_names``), so the BC runner, checkpoints and export read it as they read an env; it has no physics, and
``step`` refuses. It travels in checkpoints as plain data (:meth:`to_dict`), so a checkpoint exports without the
dataset beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY
from rslkit.data.lerobot_cameras import dataset_cameras, declared_frame_shape
from rslkit.data.lerobot_meta import feature_names, read_info, read_tasks
from rslkit.envs.camera_groups import camera_group
from rslkit.envs.vec_env import VecEnv

STATE_GROUP = "policy"
"""The observation group holding ``observation.state`` (the default ``policy.obs_group`` / ``policy.state_group``)."""


def _vector_size(root: Path, info: dict, key: str) -> int:
    shape = info["features"].get(key, {}).get("shape")
    if not isinstance(shape, (list, tuple)) or len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 1:
        raise ValueError(
            f"Dataset '{root}' declares no '{key}' vector in meta/info.json (got shape {shape!r}); behaviour cloning "
            f"reads '{OBS_KEY}' and '{ACTION_KEY}' vectors: record them, or convert the dataset to LeRobot v3.0."
        )
    return int(shape[0])


@dataclass
class DatasetSpec(VecEnv):
    """The shapes and names of a dataset, in the read side of the VecEnv interface (``num_envs`` of them).

    Attributes:
        dataset: the directory it was read from.
        state_dim: size of ``observation.state`` (the observation group ``policy``).
        num_actions: size of ``action``.
        cameras: ``{camera name: [H, W]}`` of the image and video features (groups ``camera_<name>``).
        instructions: the task strings by ``task_index`` (``meta/tasks.parquet``; empty when it has none).
        fps: frames per second of the recording (the control rate); 0 when unknown.
        action_names: ``meta/info.json``'s names of the action columns, or None.
        state_names: names of the state columns, or None.
        num_envs: batch size of :meth:`get_observations`.
    """

    dataset: str
    state_dim: int
    num_actions: int
    cameras: dict[str, list[int]] = field(default_factory=dict)
    instructions: list[str] = field(default_factory=list)
    fps: float = 0.0
    action_names: list[str] | None = None
    state_names: list[str] | None = None
    num_envs: int = 1

    def __post_init__(self) -> None:
        self.max_episode_length = 0
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self.device = "cpu"
        self.cfg = None

    @classmethod
    def read(cls, root: str | Path, num_envs: int = 1) -> DatasetSpec:
        """The spec of the dataset at ``root`` (its ``meta/`` files only: no frame or video is read).

        Raises:
            FileNotFoundError: ``root`` does not exist.
            ValueError: not a LeRobotDataset v3.0 (no ``meta/info.json``), or no state or action vector.
        """
        root = Path(root)
        info = read_info(root)
        cameras = {
            name: list(declared_frame_shape(root, key, info["features"][key])[:2])
            for name, key in dataset_cameras(info["features"]).items()
        }
        tasks = read_tasks(root) if (root / "meta" / "tasks.parquet").is_file() else []
        return cls(
            dataset=str(root),
            state_dim=_vector_size(root, info, OBS_KEY),
            num_actions=_vector_size(root, info, ACTION_KEY),
            cameras=cameras,
            instructions=tasks,
            fps=float(info.get("fps", 0) or 0),
            action_names=feature_names(info, ACTION_KEY),
            state_names=feature_names(info, OBS_KEY),
            num_envs=num_envs,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a checkpoint (``num_envs`` left out)."""
        out = asdict(self)
        del out["num_envs"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], num_envs: int = 1) -> DatasetSpec:
        """The spec :meth:`to_dict` wrote."""
        return cls(**{**data, "num_envs": num_envs})

    @property
    def step_dt(self) -> float | None:
        """Seconds per recorded frame (the control period), None when the dataset gives no ``fps``."""
        return 1.0 / self.fps if self.fps > 0 else None

    @property
    def observation_names(self) -> dict[str, list[str]]:
        """Column names of the state group, where the dataset names them."""
        return {STATE_GROUP: list(self.state_names)} if self.state_names else {}

    def get_observations(self) -> TensorDict:
        """Zeros of the declared shapes, batch ``[num_envs]``: ``policy [N, S]`` float and ``camera_<name>
        [N, H, W, 3]`` uint8 (a dataset has no live observation; the BC pair sizes its policy from these)."""
        groups: dict[str, torch.Tensor] = {STATE_GROUP: torch.zeros(self.num_envs, self.state_dim)}
        for name, (h, w) in self.cameras.items():
            groups[camera_group(name)] = torch.zeros(self.num_envs, h, w, 3, dtype=torch.uint8)
        return TensorDict(groups, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Refused: a dataset has no physics.

        Raises:
            ValueError: always, saying how to evaluate in a simulator.
        """
        raise ValueError(
            f"This run trains from the dataset '{self.dataset}' alone and has no simulator to step: pass --task NAME "
            "to evaluate rollouts in one (the dataset's validation episodes are evaluated either way)."
        )
