"""Columns of a vector by index, range or name: ``"0:6,ee.*,target.x"`` -> column indices.

One selector for every place that picks columns of an observation or state vector: a scripted expert reading its
task's observation by name (:class:`Columns`), a progress critic reading some state columns only
(``python -m rslkit.rewards train --state_columns``), a VLA's auxiliary state target (``--agent.aux_state_columns``).
A spec is a comma-separated list of items, each a column index (``3``), a half-open range (``0:6``) or a glob over
the column names (``*.pos_normalized``: a task's ``observation_names``, a LeRobot dataset's
``features["observation.state"].names``).

Why a critic reads some columns only: a classifier of "done" trained on demonstrations learns whatever tells the
demonstrations from everything else; the joint velocities and the last action of a scripted expert do that at any
arm position, and a learner's own visits then score "not done" even at the goal. Reading the positions alone removes
that cue.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

import numpy as np

SHOWN_NAMES = 8
"""Names an error message lists before it abbreviates."""


def _some(names: Sequence[str]) -> str:
    """The first :data:`SHOWN_NAMES` names, and how many more there are."""
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f", ... ({len(names) - SHOWN_NAMES} more)" if len(names) > SHOWN_NAMES else "")


def _item_columns(item: str, names: Sequence[str] | None, dim: int) -> list[int]:
    if item.lstrip("-").isdigit():
        return [int(item)]
    start, colon, stop = item.partition(":")
    if colon and (start or "0").isdigit() and (stop or str(dim)).isdigit():
        return list(range(int(start or 0), int(stop or dim)))
    if names is None:
        raise ValueError(
            f"State column {item!r} is a name, but the state's columns have no names here; give indices or ranges "
            f"(0:6,12) instead."
        )
    matched = [i for i, name in enumerate(names) if fnmatchcase(name, item)]
    if not matched:
        raise ValueError(f"State column {item!r} matches none of the state's columns ({_some(names)}).")
    return matched


def select_state_columns(spec: str, dim: int, names: Sequence[str] | None = None) -> tuple[int, ...]:
    """The sorted column indices ``spec`` names in a ``dim``-column vector (``""``: every column).

    Args:
        spec: comma-separated indices, ``start:stop`` ranges and name globs.
        dim: number of columns.
        names: the ``dim`` column names, or None (then only indices and ranges are allowed).

    Raises:
        ValueError: a column outside ``0..dim-1`` (the message gives that range and some names, not every index),
            a name that matches nothing, names of the wrong length.
    """
    if names is not None and len(names) != dim:
        raise ValueError(f"{len(names)} state column names for a state of {dim} columns.")
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        return tuple(range(dim))
    columns = sorted({c for item in items for c in _item_columns(item, names, dim)})
    bad = [c for c in columns if not 0 <= c < dim]
    if bad:
        outside = str(bad[0]) if len(bad) == 1 else f"{len(bad)} columns from {bad[0]} to {bad[-1]}"
        hint = f"; its columns are named {_some(names)}" if names is not None else ""
        raise ValueError(
            f"State columns {spec!r} reach outside the state's {dim} columns ({outside}): valid indices are "
            f"0..{dim - 1}{hint}."
        )
    if not columns:
        raise ValueError(f"State column spec {spec!r} selects no column.")
    return tuple(columns)


class Columns:
    """Named columns of one observation group, for code that reads observations by name (a scripted expert).

    ``cols = Columns(SO101LiftTask.observation_names["policy"])``; ``obs[..., cols["cube.*"]]`` are the cube's
    ``x, y, z``; ``obs[..., cols.one("touch.fixed_jaw")]`` one column. Indices come in column order
    (:func:`select_state_columns`).
    """

    def __init__(self, names: Sequence[str], group: str = "policy") -> None:
        self.names, self.group = list(names), group

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, spec: str) -> np.ndarray:
        """Indices ``[K]`` of the columns ``spec`` selects."""
        return np.asarray(select_state_columns(spec, len(self.names), self.names), dtype=np.int64)

    def one(self, name: str) -> int:
        """The index of the one column ``name`` selects.

        Raises:
            ValueError: ``name`` selects no or several columns.
        """
        found = self[name]
        if found.size != 1:
            raise ValueError(f"{name!r} selects {found.size} columns of group '{self.group}', not one.")
        return int(found[0])

    def check(self, width: int, reader: str) -> None:
        """Raise a ValueError unless an observation of ``width`` columns has these columns (names ``reader``)."""
        if width != len(self.names):
            raise ValueError(
                f"{reader} reads an observation group '{self.group}' of {len(self.names)} columns "
                f"({_some(self.names)}), got {width}; use it with the task it belongs to."
            )
