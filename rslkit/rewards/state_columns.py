"""Which columns of a state vector a progress critic reads: ``"0:6,ee.*,target.x"`` -> column indices.

A classifier of "done" trained on demonstrations learns whatever tells the demonstrations from everything else; the
joint velocities and the last action of a scripted expert do that at any arm position, and a learner's own visits
then score "not done" even at the goal. Reading the positions alone removes that cue. A spec is a comma-separated
list of items, each a column index (``3``), a half-open range (``0:6``) or a glob over the state's column names
(``*.pos_normalized``: a task's ``observation_names``, a LeRobot dataset's ``features["observation.state"].names``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase


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
        raise ValueError(f"State column {item!r} matches none of the state's columns {list(names)}.")
    return matched


def select_state_columns(spec: str, dim: int, names: Sequence[str] | None = None) -> tuple[int, ...]:
    """The sorted column indices ``spec`` names in a ``dim``-column state (``""``: every column).

    Args:
        spec: comma-separated indices, ``start:stop`` ranges and name globs.
        dim: number of state columns.
        names: the ``dim`` column names, or None (then only indices and ranges are allowed).

    Raises:
        ValueError: a column outside ``[0, dim)``, a name that matches nothing, names of the wrong length.
    """
    if names is not None and len(names) != dim:
        raise ValueError(f"{len(names)} state column names for a state of {dim} columns.")
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        return tuple(range(dim))
    columns = sorted({c for item in items for c in _item_columns(item, names, dim)})
    bad = [c for c in columns if not 0 <= c < dim]
    if bad:
        raise ValueError(f"State columns {bad} of {spec!r} lie outside the state's {dim} columns (0 to {dim - 1}).")
    if not columns:
        raise ValueError(f"State column spec {spec!r} selects no column.")
    return tuple(columns)
