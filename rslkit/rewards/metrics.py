"""How good is a progress critic: value-order correlation, negative-step rate, reversed-trajectory sign, done AUROC.

- VOC (VLAC): the Spearman correlation between an episode's accumulated value and time; 1 for a value that rises
  monotonically through a successful demonstration.
- Negative-step rate: the fraction of consecutive steps whose delta is negative (after the dead-band) on
  demonstrations, which make progress throughout.
- Reversed VOC: the same episode played backwards should score a falling value (VOC near -1).
- Done AUROC: how well the done probability ranks done frames above the others (0.5: chance).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

ArrayLike = torch.Tensor | np.ndarray | Sequence[float]


def value_order_correlation(values: ArrayLike) -> float:
    """Spearman correlation of ``values [T]`` with ``0..T-1`` (ties get average ranks); 0 for a constant value.

    Raises:
        ValueError: fewer than 2 values.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size < 2:
        raise ValueError(f"VOC needs at least 2 values, got {v.size}; score longer episodes or a smaller stride.")
    if np.ptp(v) == 0.0:
        return 0.0
    from scipy import stats  # imported here: `import rslkit.recipes` must stay light

    return float(stats.spearmanr(v, np.arange(v.size)).statistic)


def negative_step_rate(deltas: ArrayLike, dead_band: float = 0.0) -> float:
    """Fraction of ``deltas`` below ``-dead_band`` (progress the critic saw reversed)."""
    d = np.asarray(deltas, dtype=np.float64).reshape(-1)
    if d.size == 0:
        raise ValueError("negative_step_rate needs at least one delta.")
    return float((d < -dead_band).mean())


def done_auroc(done_prob: ArrayLike, is_done: ArrayLike | Sequence[bool]) -> float:
    """Area under the ROC curve of ``done_prob [F]`` against labels ``is_done [F]`` (Mann-Whitney U / (n1 n0)).

    Raises:
        ValueError: shapes differ, or the labels hold only one class.
    """
    p = np.asarray(done_prob, dtype=np.float64).reshape(-1)
    y = np.asarray(is_done, dtype=bool).reshape(-1)
    if p.shape != y.shape:
        raise ValueError(f"done_auroc got {p.size} probabilities and {y.size} labels.")
    positives, negatives = p[y], p[~y]
    if positives.size == 0 or negatives.size == 0:
        raise ValueError("done_auroc needs done and not-done frames; evaluate on episodes that reach the goal.")
    from scipy import stats

    u = stats.mannwhitneyu(positives, negatives, alternative="two-sided").statistic
    return float(u / (positives.size * negatives.size))
