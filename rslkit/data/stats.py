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


def sample_indices(num_frames: int) -> np.ndarray:
    """Frames LeRobot samples for image statistics: all of up to 100, then ``F^0.75`` (at most 10,000) spread evenly."""
    num = max(min(num_frames, 100), min(int(num_frames**0.75), 10_000))
    return np.round(np.linspace(0, num_frames - 1, num)).astype(np.int64)


def image_stats(frames: np.ndarray) -> dict[str, list]:
    """Per-channel statistics of camera frames, as LeRobot computes them for ``image``/``video`` features.

    Pixels of the frames of :func:`sample_indices` (every ``k``-th row and column when a side is 300 px or more,
    ``k = side / 150``) are scaled to ``[0, 1]``; each statistic is ``[3, 1, 1]``, ``count`` the number of sampled
    frames. (lerobot 0.4.4 writes ``std`` 0 here, an overflow of its uint8 squares; these are the true values.)

    Args:
        frames: ``[F, H, W, 3]`` uint8.
    """
    x = frames[sample_indices(len(frames))]
    height, width = x.shape[1], x.shape[2]
    if max(height, width) >= 300:
        step = int(width / 150) if width > height else int(height / 150)
        x = x[:, ::step, ::step]
    stats = feature_stats(x.reshape(-1, x.shape[-1]).astype(np.float64) / 255.0)
    return {k: [int(x.shape[0])] if k == "count" else [[[v]] for v in values] for k, values in stats.items()}


def aggregate_stats(per_episode: list[dict[str, list]]) -> dict[str, list]:
    """Dataset statistics from per-episode ones, as LeRobot aggregates them: count-weighted means, the pooled
    variance, extreme min/max and count-weighted quantiles."""
    counts = np.array([s["count"][0] for s in per_episode], dtype=np.float64)
    stacked = {k: np.asarray([s[k] for s in per_episode], dtype=np.float64) for k in per_episode[0] if k != "count"}
    w = (counts / counts.sum()).reshape(-1, *[1] * (stacked["mean"].ndim - 1))
    mean = (w * stacked["mean"]).sum(0)
    var = (w * (stacked["std"] ** 2 + (stacked["mean"] - mean) ** 2)).sum(0)
    out = {"min": stacked["min"].min(0), "max": stacked["max"].max(0), "mean": mean, "std": np.sqrt(var)}
    out.update({k: (w * v).sum(0) for k, v in stacked.items() if k in QUANTILES})
    return {k: [int(counts.sum())] if k == "count" else out[k].tolist() for k in per_episode[0]}
