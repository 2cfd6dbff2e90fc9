"""Per-episode statistics columns of ``meta/episodes/*.parquet``, typed exactly as lerobot writes them.

lerobot concatenates all episodes files of a dataset and refuses files whose schemas differ, so a dataset it appends
to must have its columns: ``stats/<feature>/<stat>`` for every feature (in ``meta/info.json`` order) and every stat
(``min, max, mean, std, count, q01, q10, q50, q90, q99``), each a variable-length list: ``min``/``max`` in the
feature's kind (double, int64 or bool), ``count`` int64, the rest double; camera features nest ``[3, 1, 1]`` doubles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from rslkit.data.lerobot_cameras import CAMERA_DTYPES
from rslkit.data.stats import feature_stats, image_stats


def lerobot_stats(values: np.ndarray, dtype: str) -> dict[str, list]:
    """Statistics of one feature (over one episode, or a whole dataset) with lerobot's value kinds.

    Args:
        values: ``[T]`` or ``[T, D]`` numbers, or ``[T, H, W, 3]`` uint8 frames for a camera feature.
        dtype: the feature's ``meta/info.json`` dtype.

    Returns:
        ``{stat: list}``; ``min``/``max`` keep the values' kind (ints stay ints, bools bools).
    """
    if dtype in CAMERA_DTYPES:
        return image_stats(values)
    stats = feature_stats(values)
    flat = values.reshape(len(values), -1)
    stats["min"], stats["max"] = flat.min(0).tolist(), flat.max(0).tolist()
    return stats


def _stat_type(dtype: str, stat: str) -> pa.DataType:
    if stat == "count":
        return pa.list_(pa.int64())
    if dtype in CAMERA_DTYPES:
        return pa.list_(pa.list_(pa.list_(pa.float64())))
    if stat in ("min", "max") and dtype == "bool":
        return pa.list_(pa.bool_())
    if stat in ("min", "max") and np.issubdtype(np.dtype(dtype), np.integer):
        return pa.list_(pa.int64())
    return pa.list_(pa.float64())


def episode_stats_columns(
    features: Mapping[str, dict], per_episode: Sequence[Mapping[str, dict[str, list]]]
) -> dict[str, pa.Array]:
    """``stats/<feature>/<stat>`` columns, one row per episode, for the features in ``per_episode``.

    Args:
        features: ``meta/info.json`` features (their order is the column order).
        per_episode: ``[{feature: {stat: list}}]`` from :func:`lerobot_stats`, one per episode.
    """
    columns: dict[str, pa.Array] = {}
    for key, feature in features.items():
        if key not in per_episode[0]:
            continue
        for stat in per_episode[0][key]:
            values = [ep[key][stat] for ep in per_episode]
            columns[f"stats/{key}/{stat}"] = pa.array(values, _stat_type(feature["dtype"], stat))
    return columns
