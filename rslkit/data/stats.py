"""Feature statistics in the LeRobotDataset ``meta/stats.json`` layout."""

from __future__ import annotations

import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
"""Quantiles written beside ``min``/``max``/``mean``/``std``/``count`` (LeRobot's set)."""


def feature_stats(values: np.ndarray) -> dict[str, list]:
    """Per-dimension statistics of one feature.

    Args:
        values: ``[F]`` or ``[F, D]`` numbers (frames first).

    Returns:
        ``{min, max, mean, std, count, q01, q10, q50, q90, q99}`` as JSON-ready lists of length ``D``
        (``count`` is ``[F]``, one entry, as LeRobot writes it).
    """
    x = np.asarray(values, dtype=np.float64)
    x = x.reshape(x.shape[0], -1)
    out: dict[str, list] = {
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "count": [int(x.shape[0])],
    }
    for name, q in QUANTILES.items():
        out[name] = np.quantile(x, q, axis=0).tolist()
    return out
