"""Read the ``meta/`` files of a LeRobotDataset v3.0: ``info.json``, ``stats.json`` and ``tasks.parquet``.

Every problem a user can fix gets a ``ValueError`` naming the file and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rslkit.data.lerobot_format import (
    CODEBASE_VERSION,
    CONVERT_HINT,
    DATA_PATH,
    INFO_PATH,
    RECORD_HINT,
    STATS_HINT,
    STATS_PATH,
    TASKS_PATH,
)

INFO_FIX = "repair the file or re-create the dataset"
TASK_COLUMNS = ("task", "__index_level_0__")
"""Where the task string lies in ``meta/tasks.parquet``: rslkit names the pandas index ``task``; lerobot leaves it
unnamed, so pandas stores it as ``__index_level_0__`` (``large_string``)."""


def read_json(path: Path, fix: str) -> dict:
    """The JSON object in ``path``; ValueError naming the file (and ``fix``) when it is not one."""
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError as err:
        raise ValueError(f"'{path}' is not a UTF-8 text file ({err.reason}); {fix}.") from err
    except json.JSONDecodeError as err:
        raise ValueError(
            f"'{path}' is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); {fix}."
        ) from err
    if not isinstance(data, dict):
        raise ValueError(f"'{path}' must hold a JSON object, got a {type(data).__name__}; {fix}.")
    return data


def read_info(root: Path) -> dict:
    """``meta/info.json`` of a v3.0 dataset, checked for the keys rslkit relies on.

    Raises:
        FileNotFoundError: when ``root`` does not exist.
        ValueError: for a missing or v2.1 layout, another codebase version, or malformed keys.
    """
    if not root.exists():
        raise FileNotFoundError(f"Dataset '{root}' does not exist; {RECORD_HINT}.")
    path = root / INFO_PATH
    if not path.is_file():
        legacy = (root / "meta" / "episodes.jsonl").exists()
        hint = CONVERT_HINT if legacy else RECORD_HINT
        raise ValueError(f"'{root}' is not a LeRobotDataset v3.0 (no {INFO_PATH}); {hint}.")
    info = read_json(path, INFO_FIX)
    missing = [k for k in ("codebase_version", "features") if k not in info]
    if missing:
        raise ValueError(f"'{path}' lacks the keys {missing} of every LeRobotDataset v3.0; {INFO_FIX}.")
    version = info["codebase_version"]
    if version != CODEBASE_VERSION:
        raise ValueError(
            f"Dataset '{root}' has codebase_version {version!r}, rslkit reads '{CODEBASE_VERSION}'; {CONVERT_HINT}."
        )
    if not isinstance(info["features"], dict):
        raise ValueError(f"'{path}' key 'features' must map feature names to objects; {INFO_FIX}.")
    if not isinstance(info.get("data_path", DATA_PATH), str):
        raise ValueError(f"'{path}' key 'data_path' must be a path template like '{DATA_PATH}'; {INFO_FIX}.")
    if not isinstance(info.get("fps", 0), (int, float)):
        raise ValueError(f"'{path}' key 'fps' must be a number, got {info['fps']!r}; {INFO_FIX}.")
    return info


def feature_names(info: dict, key: str) -> list[str] | None:
    """The column names of feature ``key`` in ``info`` (``meta/info.json``): its ``names`` list (or LeRobot's
    ``{"motors": [...]}``), None where it has none."""
    names = info["features"].get(key, {}).get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    return [str(n) for n in names] if isinstance(names, list) else None


def read_stats(root: Path, dims: dict[str, int]) -> dict:
    """``meta/stats.json``, checked to hold finite ``min``/``max`` of size ``dims[key]`` for each key."""
    if not (root / STATS_PATH).is_file():
        raise ValueError(
            f"Dataset '{root}' has no {STATS_PATH} (normalization needs min/max); {STATS_HINT.format(root=root)}."
        )
    stats = read_json(root / STATS_PATH, STATS_HINT.format(root=root))
    for key, dim in dims.items():
        entry = stats.get(key, {})
        for stat in ("min", "max"):
            value = np.asarray(entry.get(stat, []), dtype=np.float64).reshape(-1)
            if value.size != dim or not np.isfinite(value).all():
                raise ValueError(
                    f"{STATS_PATH} of '{root}' lacks a finite '{key}/{stat}' of size {dim}; "
                    f"{STATS_HINT.format(root=root)}."
                )
    return stats


def read_parquet(path: Path, skip: Collection[str] = ()) -> pa.Table:
    """The table of one parquet file of a dataset, without the columns in ``skip``.

    Raises:
        ValueError: the file is not readable parquet (truncated, corrupt); the message names the file.
    """
    try:
        columns = [c for c in pq.read_schema(path).names if c not in skip] if skip else None
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise ValueError(
            f"'{path}' is not a readable parquet file ({err}); it may be truncated: re-download or re-record the "
            "dataset."
        ) from err


def _is_text(column: pa.ChunkedArray) -> bool:
    return pa.types.is_string(column.type) or pa.types.is_large_string(column.type)


def read_tasks(root: Path) -> list[str]:
    """Task strings (language goals) by ``task_index`` from ``meta/tasks.parquet``.

    The string is the ``task`` column (rslkit) or the unnamed pandas index ``__index_level_0__`` (lerobot).

    Raises:
        ValueError: when the file is missing or has no ``task_index`` and task-string columns.
    """
    path = root / TASKS_PATH
    fix = "re-create the dataset, or write the file with pandas: DataFrame({'task_index': [0, ...]}, index=tasks)"
    if not path.is_file():
        raise ValueError(f"Dataset '{root}' has no {TASKS_PATH} (the task of each frame); {fix}.")
    table = read_parquet(path)
    names = [c for c in TASK_COLUMNS if c in table.column_names and _is_text(table[c])]
    if "task_index" not in table.column_names or not names:
        columns = {c: str(table[c].type) for c in table.column_names}
        raise ValueError(
            f"'{path}' needs an int 'task_index' column and the task string in a 'task' or '__index_level_0__' "
            f"string column, got {columns}; {fix}."
        )
    order = np.argsort(table["task_index"].to_numpy())
    tasks = table[names[0]].to_pylist()
    return [tasks[i] for i in order]
