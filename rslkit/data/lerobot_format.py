"""Constants of the LeRobotDataset v3.0 layout (``meta/`` JSON + parquet, ``data/`` parquet)."""

from __future__ import annotations

from pathlib import Path

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
CHUNKS_SIZE = 1000
"""Files per chunk folder."""

DEFAULT_FEATURES: dict[str, dict] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
"""Columns every LeRobot data file has."""

RECORD_HINT = "record a dataset with `.venv/bin/python -m rslkit.record --checkpoint C --out DIR`"
STATS_HINT = "recompute it with `python -c \"from rslkit.data import recompute_stats; recompute_stats('{root}')\"`"
CONVERT_HINT = (
    "convert it with LeRobot (`python -m lerobot.datasets.v30.convert_dataset_v21_to_v30 --repo-id=...`) "
    "on a machine with lerobot >= 0.4 installed"
)


def dataset_path(root: str | Path, template: str, chunk_index: int = 0, file_index: int = 0) -> Path:
    """``root / template`` with the chunk and file indices filled in."""
    return Path(root) / template.format(chunk_index=chunk_index, file_index=file_index)
