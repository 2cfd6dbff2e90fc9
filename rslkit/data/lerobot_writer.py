"""Write demonstrations as a LeRobotDataset v3.0 (readable by LeRobot >= 0.4 and by :mod:`rslkit.data`).

One data file and one episodes file (``chunk-000/file-000``) hold all episodes; vectors are fixed-size parquet
lists, scalars plain columns, exactly as LeRobot stores them. Each camera of the episodes becomes a ``video``
feature: one MP4 per camera, episodes back to back (:mod:`rslkit.data.lerobot_video_writer`). The episodes
metadata carries per-episode statistics of every feature, typed as lerobot writes them, so that lerobot can append
episodes to the dataset and reopen it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rslkit.data.demonstrations import (
    ACTION_KEY,
    DONE_KEY,
    ENV_STATE_KEY,
    OBS_KEY,
    REWARD_KEY,
    SUCCESS_KEY,
    Episode,
)
from rslkit.data.lerobot_episode_stats import episode_stats_columns, lerobot_stats
from rslkit.data.lerobot_format import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_PATH,
    DEFAULT_FEATURES,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    dataset_path,
)
from rslkit.data.lerobot_video_writer import camera_frames, write_videos
from rslkit.data.stats import aggregate_stats
from rslkit.data.video import DEFAULT_CODEC, check_encoder


def _column(values: np.ndarray) -> pa.Array:
    """``[F]`` and ``[F, 1]`` -> plain column (LeRobot stores shape-``[1]`` features as scalars), ``[F, D]`` ->
    fixed-size list column of length ``D``."""
    if values.ndim == 1 or values.shape[1] == 1:
        return pa.array(values.reshape(-1))
    return _list_column(values)


def _list_column(values: np.ndarray) -> pa.Array:
    """``[F, D]`` -> fixed-size list column of length ``D`` (also for ``D = 1``)."""
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def _feature(dtype: str, dim: int, names: Sequence[str] | None, key: str = "") -> dict:
    if names is not None and len(names) != dim:
        raise ValueError(f"{len(names)} names for the {dim} columns of '{key}'; give one name per column, or none.")
    return {"dtype": dtype, "shape": [dim], "names": [str(n) for n in names] if names is not None else None}


def _frame_columns(episodes: Sequence[Episode], fps: int, task_ids: dict[str, int]) -> dict[str, np.ndarray]:
    lengths = [len(ep) for ep in episodes]
    cols: dict[str, np.ndarray] = {
        OBS_KEY: np.concatenate([ep.observations.detach().cpu().float().numpy() for ep in episodes]),
        ACTION_KEY: np.concatenate([ep.actions.detach().cpu().float().numpy() for ep in episodes]),
    }
    if all(ep.rewards is not None for ep in episodes):
        cols[REWARD_KEY] = np.concatenate([ep.rewards.detach().cpu().float().numpy() for ep in episodes])  # type: ignore[union-attr]
    if all(ep.env_state is not None for ep in episodes):
        cols[ENV_STATE_KEY] = np.concatenate([ep.env_state.detach().cpu().float().numpy() for ep in episodes])  # type: ignore[union-attr]
    if all(ep.dones is not None for ep in episodes):
        cols[DONE_KEY] = np.concatenate([ep.dones.detach().cpu().bool().numpy() for ep in episodes])  # type: ignore[union-attr]
    if all(ep.successes is not None for ep in episodes):
        cols[SUCCESS_KEY] = np.concatenate([ep.successes.detach().cpu().bool().numpy() for ep in episodes])  # type: ignore[union-attr]
    frame_index = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])
    cols["timestamp"] = (frame_index / fps).astype(np.float32)
    cols["frame_index"] = frame_index
    cols["episode_index"] = np.repeat(np.arange(len(episodes), dtype=np.int64), lengths)
    cols["index"] = np.arange(sum(lengths), dtype=np.int64)
    cols["task_index"] = np.repeat(np.array([task_ids[ep.task] for ep in episodes], dtype=np.int64), lengths)
    return cols


def _tasks_table(tasks: list[str]) -> pa.Table:
    """``task_index`` column indexed by the task string, as pandas writes LeRobot's ``tasks`` DataFrame."""
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
    }
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _episodes_table(
    episodes: Sequence[Episode], video_columns: dict[str, pa.Array], stats_columns: dict[str, pa.Array]
) -> pa.Table:
    """One row per episode, columns in lerobot's order (bookkeeping, videos, stats, then the metadata file)."""
    lengths = np.array([len(ep) for ep in episodes], dtype=np.int64)
    ends = np.cumsum(lengths)
    zeros = np.zeros(len(episodes), dtype=np.int64)
    data: dict[str, pa.Array] = {
        "episode_index": pa.array(np.arange(len(episodes), dtype=np.int64)),
        "tasks": pa.array([[ep.task] for ep in episodes], pa.list_(pa.string())),
        "length": pa.array(lengths),
        "data/chunk_index": pa.array(zeros),
        "data/file_index": pa.array(zeros),
        "dataset_from_index": pa.array(ends - lengths),
        "dataset_to_index": pa.array(ends),
        **video_columns,
        **stats_columns,
        "meta/episodes/chunk_index": pa.array(zeros),
        "meta/episodes/file_index": pa.array(zeros),
    }
    return pa.table(data)


def _per_episode_stats(
    features: dict[str, dict], cols: dict[str, np.ndarray], cameras: dict[str, list[np.ndarray]], ends: np.ndarray
) -> list[dict[str, dict[str, list]]]:
    """``[{feature: {stat: list}}]`` for every feature, one entry per episode."""
    starts = np.concatenate([[0], ends[:-1]])
    return [
        {
            key: lerobot_stats(cameras[key][e] if key in cameras else cols[key][a:b], ft["dtype"])
            for key, ft in features.items()
        }
        for e, (a, b) in enumerate(zip(starts, ends))
    ]


def _check_episodes(episodes: Sequence[Episode], fps: int) -> None:
    if not episodes:
        raise ValueError("No episodes to write; record at least one episode.")
    if fps < 1:
        raise ValueError(f"fps must be a positive integer, got {fps}.")
    dims = {(ep.observations.shape[1], ep.actions.shape[1]) for ep in episodes}
    if len(dims) != 1:
        raise ValueError(f"All episodes need the same observation and action sizes, got {sorted(dims)}.")
    env_dims = {None if ep.env_state is None else ep.env_state.shape[1] for ep in episodes}
    if len(env_dims) != 1:
        raise ValueError(f"Either every episode has an env_state of one size or none has, got sizes {env_dims}.")


def _vector_features(cols: dict[str, np.ndarray], names: dict[str, Sequence[str] | None]) -> dict[str, dict]:
    """The vector features of ``cols``, with the column names ``names[key]`` (or none)."""
    features = {
        OBS_KEY: _feature("float32", cols[OBS_KEY].shape[1], names.get(OBS_KEY), OBS_KEY),
        ACTION_KEY: _feature("float32", cols[ACTION_KEY].shape[1], names.get(ACTION_KEY), ACTION_KEY),
    }
    if ENV_STATE_KEY in cols:
        features[ENV_STATE_KEY] = _feature(
            "float32", cols[ENV_STATE_KEY].shape[1], names.get(ENV_STATE_KEY), ENV_STATE_KEY
        )
    if REWARD_KEY in cols:
        features[REWARD_KEY] = _feature("float32", 1, None)
    if DONE_KEY in cols:
        features[DONE_KEY] = _feature("bool", 1, None)
    if SUCCESS_KEY in cols:
        features[SUCCESS_KEY] = _feature("bool", 1, None)
    return features


def write_lerobot_dataset(
    root: str | Path,
    episodes: Sequence[Episode],
    fps: int,
    robot_type: str = "rslkit",
    obs_names: Sequence[str] | None = None,
    action_names: Sequence[str] | None = None,
    overwrite: bool = False,
    video_codec: str = DEFAULT_CODEC,
    env_state_names: Sequence[str] | None = None,
) -> Path:
    """Write ``episodes`` as a LeRobotDataset v3.0 under ``root``.

    Features: ``observation.state [D]``, ``action [A]``, ``observation.environment_state [E]``, ``next.reward``,
    ``next.done`` and ``next.success`` when every episode has them, a ``video`` feature
    ``observation.images.<name> [H, W, 3]`` per camera of ``Episode.images``, plus LeRobot's ``timestamp``,
    ``frame_index``, ``episode_index``, ``index``, ``task_index``. Each episode's ``task`` (its language goal) goes
    to ``meta/tasks.parquet``.

    Args:
        obs_names, action_names, env_state_names: the column names of ``observation.state``, ``action`` and
            ``observation.environment_state`` (``features[key]["names"]`` in ``meta/info.json``: what
            ``--state_columns 'ee.*'`` selects by), or None.
        video_codec: PyAV encoder of the camera videos: ``libsvtav1`` (AV1, LeRobot's default) or e.g. ``libx264``.

    Returns:
        ``root`` as a Path.

    Raises:
        ValueError: for no episodes, inconsistent sizes or cameras, names of the wrong length, non-finite values,
            odd image sizes, a missing video encoder, or an existing dataset without ``overwrite``.
        ImportError: for episodes with cameras when PyAV is not installed.
    """
    root = Path(root)
    _check_episodes(episodes, fps)
    cameras = camera_frames(episodes)
    if cameras:
        check_encoder(video_codec)
    tasks = list(dict.fromkeys(ep.task for ep in episodes))
    cols = _frame_columns(episodes, fps, {t: i for i, t in enumerate(tasks)})
    for key in (OBS_KEY, ACTION_KEY, REWARD_KEY, ENV_STATE_KEY):
        if key in cols and not np.isfinite(cols[key]).all():
            raise ValueError(f"Feature '{key}' has NaN or inf values; fix the recording before writing.")
    vector_features = _vector_features(
        cols, {OBS_KEY: obs_names, ACTION_KEY: action_names, ENV_STATE_KEY: env_state_names}
    )
    if (root / INFO_PATH).exists():
        if not overwrite:
            raise ValueError(
                f"'{root}' already holds a dataset; choose another --out, or pass --overwrite to replace it."
            )
        for sub in ("meta", "data", "videos"):
            shutil.rmtree(root / sub, ignore_errors=True)
    video_features, video_columns = write_videos(root, cameras, fps, video_codec)
    features = {**vector_features, **video_features, **DEFAULT_FEATURES}
    per_episode = _per_episode_stats(features, cols, cameras, np.cumsum([len(ep) for ep in episodes]))

    data_file = dataset_path(root, DATA_PATH)
    data_file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: _column(cols[k]) for k in features if k not in video_features}), data_file)
    episodes_file = dataset_path(root, EPISODES_PATH)
    episodes_file.parent.mkdir(parents=True, exist_ok=True)
    stats_columns = episode_stats_columns(features, per_episode)
    pq.write_table(_episodes_table(episodes, video_columns, stats_columns), episodes_file)
    pq.write_table(_tasks_table(tasks), root / TASKS_PATH)
    stats = {
        k: lerobot_stats(cols[k], ft["dtype"]) if k in cols else aggregate_stats([s[k] for s in per_episode])
        for k, ft in features.items()
    }
    (root / STATS_PATH).write_text(json.dumps(stats, indent=4))
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": len(episodes),
        "total_frames": int(cols["index"].shape[0]),
        "total_tasks": len(tasks),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": int(fps),
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if video_features else None,
        "features": features,
    }
    (root / INFO_PATH).write_text(json.dumps(info, indent=4))
    return root
