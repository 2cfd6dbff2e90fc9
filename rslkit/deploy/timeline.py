"""Actions indexed by control tick, and the three ways a new chunk is merged into them."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

MergeMode = Literal["replace", "blend", "ensemble"]
MERGE_MODES = ("replace", "blend", "ensemble")


class ActionTimeline:
    """Planned actions per tick. A chunk ``[H, A]`` whose first action belongs to tick ``start`` is merged at tick
    ``from_tick``: ticks before ``from_tick`` (executed, or being executed) never change.

    Merge modes:

    * ``replace`` (VLASH, replace-from): the new chunk replaces every planned action from
      ``max(start, from_tick)`` on.
    * ``blend`` (LeRobot async ``weighted_average``): on ticks planned by both, ``(1 - w) old + w new``; the new
      chunk alone after that.
    * ``ensemble`` (ACT temporal ensembling): every prediction of a tick is kept; the executed action is their
      average with weights ``exp(-m i)``, ``i = 0`` for the oldest prediction.

    Args:
        mode: merge mode.
        blend_weight: ``w`` of the new chunk in ``blend`` mode.
        ensemble_m: ``m`` of ``ensemble`` mode (ACT uses 0.01).
    """

    def __init__(self, mode: MergeMode = "replace", blend_weight: float = 0.7, ensemble_m: float = 0.01) -> None:
        if mode not in MERGE_MODES:
            raise ValueError(f"Unknown merge mode '{mode}'; use one of {MERGE_MODES}.")
        if not 0.0 <= blend_weight <= 1.0:
            raise ValueError(f"blend_weight must be in [0, 1], got {blend_weight}.")
        self.mode, self.blend_weight, self.ensemble_m = mode, blend_weight, ensemble_m
        self._plan: dict[int, list[tuple[int, np.ndarray]]] = {}

    def merge(self, chunk: np.ndarray, start: int, from_tick: int, chunk_id: int) -> int:
        """Merge ``chunk [H, A]`` (``chunk[i]`` for tick ``start + i``) without touching ticks ``< from_tick``.

        Returns:
            How many of its actions were stale (for ticks ``< from_tick``) and dropped.
        """
        chunk = np.asarray(chunk)
        if chunk.ndim != 2:
            raise ValueError(f"A chunk must be [H, A], got shape {list(chunk.shape)}.")
        first = max(start, from_tick)
        stale = min(first - start, chunk.shape[0])
        end = start + chunk.shape[0]
        if self.mode != "ensemble":
            for t in [t for t in self._plan if t >= end]:
                del self._plan[t]
        for t in range(first, end):
            new = chunk[t - start]
            old = self._plan.get(t)
            if self.mode == "ensemble":
                self._plan.setdefault(t, []).append((chunk_id, new))
            elif self.mode == "blend" and old:
                w = self.blend_weight
                self._plan[t] = [(chunk_id, (1 - w) * old[0][1] + w * new)]
            else:
                self._plan[t] = [(chunk_id, new)]
        return stale

    def action(self, tick: int) -> tuple[np.ndarray, int] | None:
        """``(action [A], id of the newest chunk contributing)`` planned for ``tick``, or None."""
        entries = self._plan.get(tick)
        if not entries:
            return None
        if len(entries) == 1:
            return entries[0][1], entries[0][0]
        weights = np.array([math.exp(-self.ensemble_m * i) for i in range(len(entries))])
        stacked = np.stack([a for _, a in entries])
        mixed = (weights[:, None] * stacked).sum(0) / weights.sum()
        return mixed.astype(stacked.dtype), entries[-1][0]

    def remaining_after(self, tick: int) -> int:
        """Consecutive planned ticks after ``tick`` (``tick + 1``, ``tick + 2``, ...)."""
        n = 0
        while (tick + 1 + n) in self._plan:
            n += 1
        return n

    def planned(self, first: int, stop: int) -> np.ndarray | None:
        """Planned actions of ticks ``first .. stop - 1`` that exist, ``[n, A]`` (None when there are none)."""
        acts = [a[0] for a in (self.action(t) for t in range(first, stop)) if a is not None]
        return np.stack(acts) if acts else None

    def drop_before(self, tick: int) -> None:
        """Forget ticks ``< tick`` (executed)."""
        for t in [t for t in self._plan if t < tick]:
            del self._plan[t]

    def __len__(self) -> int:
        return len(self._plan)
