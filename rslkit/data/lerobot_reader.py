"""Read a LeRobotDataset v3.0 (state, action and, on request, camera features) into
:class:`~rslkit.data.Demonstrations`.

Cameras (``image`` and ``video`` features) are loaded only when asked for by name: a state-only caller gets none,
and ``Demonstrations.available_cameras`` lists what it left out. Every problem a user can fix gets a ``ValueError``
that says how: a missing or v2.1 layout, missing statistics, missing features or cameras, broken episode
bookkeeping, NaN or inf values, missing or mismatched video files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from rslkit.data.demonstrations import (
    ACTION_KEY,
    DONE_KEY,
    ENV_STATE_KEY,
    OBS_KEY,
    REWARD_KEY,
    SUCCESS_KEY,
    Demonstrations,
)
from rslkit.data.lerobot_camera_reader import read_image_feature, read_video_feature
from rslkit.data.lerobot_cameras import dataset_cameras, select_cameras
from rslkit.data.lerobot_format import DATA_PATH, EPISODES_DIR, INFO_PATH, RECORD_HINT, STATS_PATH, dataset_path
from rslkit.data.lerobot_meta import INFO_FIX, read_info, read_parquet, read_stats, read_tasks
from rslkit.data.stats import feature_stats
from rslkit.data.video import TIMESTAMP_TOLERANCE_S


def _check_feature(root: Path, info: dict, key: str) -> int:
    features = info["features"]
    feature = features.get(key)
    if feature is None:
        raise ValueError(
            f"Dataset '{root}' has no '{key}' feature in {INFO_PATH} (features: {sorted(features)}); rslkit "
            f"trains on '{OBS_KEY}' and '{ACTION_KEY}' vectors, so {RECORD_HINT}."
        )
    if not isinstance(feature, dict) or "shape" not in feature or "dtype" not in feature:
        raise ValueError(
            f"'{root / INFO_PATH}' feature '{key}' must be an object with 'dtype' and 'shape', got {feature!r}; "
            f"{INFO_FIX}."
        )
    shape = list(feature["shape"]) if isinstance(feature["shape"], (list, tuple)) else [feature["shape"]]
    if len(shape) != 1 or not isinstance(shape[0], int) or feature["dtype"] not in ("float32", "float64"):
        raise ValueError(
            f"Feature '{key}' of '{root}' must be a float vector, got dtype {feature.get('dtype')} "
            f"shape {shape}; camera frames belong in image/video features 'observation.images.<name>', read with "
            "read_lerobot_dataset(root, cameras=[...])."
        )
    return int(shape[0])


def _to_numpy(column: pa.ChunkedArray, dim: int, key: str) -> np.ndarray:
    """Plain or (fixed-size) list column -> ``[F]`` or ``[F, dim]``."""
    arr = column.combine_chunks()
    if pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type):
        flat = arr.flatten().to_numpy(zero_copy_only=False)
        if flat.size != len(arr) * dim:
            raise ValueError(f"Column '{key}' does not hold {dim} values per frame as meta/info.json declares.")
        return flat.reshape(len(arr), dim)
    values = arr.to_numpy(zero_copy_only=False)
    return values.reshape(len(arr), dim) if dim > 1 or key in (OBS_KEY, ACTION_KEY) else values


def _read_episodes(root: Path) -> pa.Table:
    files = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise ValueError(f"Dataset '{root}' has no {EPISODES_DIR}/chunk-*/file-*.parquet; {RECORD_HINT}.")
    table = pa.concat_tables([read_parquet(f) for f in files])
    needed = ("episode_index", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index")
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise ValueError(f"Episodes metadata of '{root}' lacks columns {missing}; re-create the dataset.")
    return table.sort_by("dataset_from_index")


def _read_frames(root: Path, info: dict, episodes: pa.Table, skip: set[str]) -> pa.Table:
    """All frames sorted by global index, without the columns in ``skip`` (image features nobody asked for)."""
    template = info.get("data_path", DATA_PATH)
    pairs = sorted(set(zip(episodes["data/chunk_index"].to_pylist(), episodes["data/file_index"].to_pylist())))
    tables = []
    for chunk, file in pairs:
        path = dataset_path(root, template, chunk, file)
        if not path.is_file():
            raise ValueError(
                f"Data file '{path}' listed in the episodes metadata is missing; re-download or re-record the dataset."
            )
        tables.append(read_parquet(path, skip))
    frames = pa.concat_tables(tables)
    if "index" not in frames.column_names or "episode_index" not in frames.column_names:
        raise ValueError(f"Data files of '{root}' lack the 'index'/'episode_index' columns every LeRobot file has.")
    return frames.sort_by("index")


def _episode_bounds(root: Path, episodes: pa.Table, frames: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row ranges of each episode in the sorted frames; checks they match the metadata."""
    global_index = frames["index"].to_numpy()
    ep_of_frame = frames["episode_index"].to_numpy()
    starts = episodes["dataset_from_index"].to_numpy()
    ends = episodes["dataset_to_index"].to_numpy()
    ep_ids = episodes["episode_index"].to_numpy()
    row_from = np.searchsorted(global_index, starts)
    row_to = np.searchsorted(global_index, ends)
    for ep, a, b, s, e in zip(ep_ids, row_from, row_to, starts, ends):
        if b - a != e - s or not (ep_of_frame[a:b] == ep).all():
            raise ValueError(
                f"Episode {ep} of '{root}' should span global indices [{s}, {e}) but the data files disagree; "
                "the dataset is corrupt (re-create it, or drop the episode with LeRobot's dataset tools)."
            )
    return ep_ids, row_from, row_to


def _check_finite(root: Path, key: str, values: np.ndarray, ep_of_frame: np.ndarray) -> None:
    bad = ~np.isfinite(values.reshape(values.shape[0], -1)).all(-1)
    if bad.any():
        eps = sorted(set(ep_of_frame[bad].tolist()))
        raise ValueError(
            f"Feature '{key}' of '{root}' has NaN or inf values in episodes {eps[:20]}; drop those episodes or "
            "re-record them."
        )


def _read_cameras(
    root: Path,
    info: dict,
    cameras: Sequence[str] | str,
    episodes: pa.Table,
    frames: pa.Table,
    bounds: tuple[np.ndarray, np.ndarray],
    tolerance_s: float,
) -> dict[str, torch.Tensor]:
    out = {}
    for name, key in select_cameras(root, info["features"], cameras).items():
        if info["features"][key]["dtype"] == "image":
            out[name] = torch.from_numpy(read_image_feature(root, key, info["features"][key], frames))
        else:
            out[name] = torch.from_numpy(read_video_feature(root, info, key, episodes, frames, bounds, tolerance_s))
    return out


def _load(
    root: Path, require_stats: bool, cameras: Sequence[str] | str = (), tolerance_s: float = 0.0
) -> Demonstrations:
    info = read_info(root)
    obs_dim, act_dim = _check_feature(root, info, OBS_KEY), _check_feature(root, info, ACTION_KEY)
    selected = select_cameras(root, info["features"], cameras)  # a missing camera fails before any data is read
    episodes = _read_episodes(root)
    frames = _read_frames(
        root, info, episodes, set(dataset_cameras(info["features"]).values()) - set(selected.values())
    )
    for key in (OBS_KEY, ACTION_KEY):
        if key not in frames.column_names:
            raise ValueError(f"Data files of '{root}' have no '{key}' column although meta/info.json lists it.")
    ep_ids, row_from, row_to = _episode_bounds(root, episodes, frames)
    ep_of_frame = frames["episode_index"].to_numpy()
    obs = _to_numpy(frames[OBS_KEY], obs_dim, OBS_KEY).astype(np.float32)
    act = _to_numpy(frames[ACTION_KEY], act_dim, ACTION_KEY).astype(np.float32)
    _check_finite(root, OBS_KEY, obs, ep_of_frame)
    _check_finite(root, ACTION_KEY, act, ep_of_frame)
    rewards = dones = successes = task_index = env_state = None
    dims = {OBS_KEY: obs_dim, ACTION_KEY: act_dim}
    if ENV_STATE_KEY in info["features"]:
        if ENV_STATE_KEY not in frames.column_names:
            raise ValueError(f"Data files of '{root}' have no '{ENV_STATE_KEY}' column; meta/info.json lists it.")
        dims[ENV_STATE_KEY] = _check_feature(root, info, ENV_STATE_KEY)
        values = _to_numpy(frames[ENV_STATE_KEY], dims[ENV_STATE_KEY], ENV_STATE_KEY).astype(np.float32)
        _check_finite(root, ENV_STATE_KEY, values, ep_of_frame)
        env_state = torch.from_numpy(values.reshape(len(values), -1))
    if REWARD_KEY in frames.column_names:
        r = _to_numpy(frames[REWARD_KEY], 1, REWARD_KEY).reshape(-1).astype(np.float32)
        _check_finite(root, REWARD_KEY, r, ep_of_frame)
        rewards = torch.from_numpy(r)
    if DONE_KEY in frames.column_names:
        dones = torch.from_numpy(_to_numpy(frames[DONE_KEY], 1, DONE_KEY).reshape(-1).astype(bool))
    if SUCCESS_KEY in frames.column_names:
        successes = torch.from_numpy(_to_numpy(frames[SUCCESS_KEY], 1, SUCCESS_KEY).reshape(-1).astype(bool))
    if "task_index" in frames.column_names:
        task_index = torch.from_numpy(frames["task_index"].to_numpy().astype(np.int64))
    stats = read_stats(root, dims) if require_stats else {}
    images = _read_cameras(root, info, cameras, episodes, frames, (row_from, row_to), tolerance_s)
    return Demonstrations(
        observations=torch.from_numpy(obs),
        actions=torch.from_numpy(act),
        episode_index=torch.from_numpy(ep_of_frame.astype(np.int64)),
        episode_from=torch.from_numpy(row_from.astype(np.int64)),
        episode_to=torch.from_numpy(row_to.astype(np.int64)),
        rewards=rewards,
        dones=dones,
        successes=successes,
        stats=stats,
        fps=int(info.get("fps", 0)),
        tasks=read_tasks(root),
        info=info,
        task_index=task_index,
        images=images,
        available_cameras=list(dataset_cameras(info["features"])),
        env_state=env_state,
    )


def read_lerobot_dataset(
    root: str | Path, cameras: Sequence[str] | str = (), tolerance_s: float = TIMESTAMP_TOLERANCE_S
) -> Demonstrations:
    """Load the ``observation.state``/``action`` frames, episode bounds, tasks and statistics of a v3.0 dataset,
    and the frames of the cameras asked for.

    Args:
        root: the dataset folder (with ``meta/``, ``data/`` and, for video features, ``videos/``).
        cameras: camera names to load into ``Demonstrations.images`` (``front`` for ``observation.images.front``;
            full keys work too), ``"all"`` for every camera, ``()`` for none: image and video features are then
            ignored, and ``Demonstrations.available_cameras`` names them. Loaded frames live in memory,
            ``F * H * W * 3`` bytes per camera.
        tolerance_s: how far a decoded video frame's time may lie from the frame's timestamp (LeRobot's 1e-4 s).

    Raises:
        FileNotFoundError: when ``root`` does not exist.
        ValueError: for a non-v3.0 layout, missing features, cameras or statistics, inconsistent episode metadata,
            NaN/inf values, or a missing video file or frames of another size than declared; the message says how
            to fix it.
        ImportError: when a video camera is asked for and PyAV is not installed.
    """
    return _load(Path(root), require_stats=True, cameras=cameras, tolerance_s=tolerance_s)


def recompute_stats(root: str | Path) -> dict:
    """Recompute ``meta/stats.json`` of a dataset from its data files (e.g. after editing them).

    Returns:
        The statistics written.
    """
    root = Path(root)
    demos = _load(root, require_stats=False)
    stats = {OBS_KEY: feature_stats(demos.observations.numpy()), ACTION_KEY: feature_stats(demos.actions.numpy())}
    if demos.rewards is not None:
        stats[REWARD_KEY] = feature_stats(demos.rewards.numpy())
    (root / STATS_PATH).write_text(json.dumps(stats, indent=4))
    return stats
