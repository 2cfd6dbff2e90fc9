"""Reordering of named joint values (a ROS ``JointState``) into the policy's joint order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class JointReorder:
    """Maps the joint order of incoming messages to the policy's order; the index is cached per name list.

    Args:
        joint_names: the policy's joints in action order.
    """

    def __init__(self, joint_names: Sequence[str]) -> None:
        self.joint_names = list(joint_names)
        self._cache: dict[tuple[str, ...], np.ndarray | list[str]] = {}

    def index(self, names: Sequence[str]) -> np.ndarray | list[str]:
        """Positions in ``names`` of the policy's joints ``[J]`` (int), or the policy joints missing from ``names``.

        Extra joints in ``names`` are ignored; a joint listed twice takes its first entry.
        """
        key = tuple(names)
        found = self._cache.get(key)
        if found is None:
            where: dict[str, int] = {}
            for i, name in enumerate(key):
                where.setdefault(name, i)
            missing = [j for j in self.joint_names if j not in where]
            found = missing if missing else np.array([where[j] for j in self.joint_names], dtype=np.intp)
            if len(self._cache) > 64:  # a publisher that varies its names every message: do not grow forever
                self._cache.clear()
            self._cache[key] = found
        return found

    def take(self, index: np.ndarray, values: Sequence[float]) -> np.ndarray:
        """``values`` (in message order) picked into policy order ``[J]`` (float64)."""
        return np.asarray(values, dtype=np.float64)[index]
