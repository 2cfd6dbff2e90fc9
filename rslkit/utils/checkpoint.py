"""Checkpoint files: plain data (tensors, dicts, lists, tuples, str, int, float, bool, None) written atomically and
read with torch's restricted unpickler (``weights_only=True``), so loading a checkpoint never runs code from it.

Everything a runner saves is plain by construction: configs as :func:`rslkit.utils.config.to_dict` dicts (rebuilt
with ``from_dict``), RNG states as tensors and tuples (:mod:`rslkit.runners.run_state`), buffers as dicts of
tensors. :func:`save_checkpoint` refuses anything else, naming the entry, so a file it writes always loads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from pickle import UnpicklingError  # the class only: what torch's restricted loader raises on a refused global
from typing import Any

import numpy as np
import torch

from rslkit.utils.atomic_write import atomic_open

try:  # what pickles of arrays call: numpy._core in NumPy 2, numpy.core in NumPy 1 (pyproject admits both)
    from numpy._core.multiarray import _reconstruct  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - NumPy 1
    from numpy.core.multiarray import _reconstruct  # type: ignore[attr-defined,no-redef]

CHECKPOINT_VERSION = 2
"""2: plain data only (1: the NumPy RNG state was a pickled ``ndarray``; such files still load, see below)."""

_PLAIN_LEAVES = (str, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)
"""Exact types (a NumPy scalar subclasses float but pickles as a NumPy object) the restricted unpickler reads."""

_NUMERIC_NDARRAY: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [
    np.ndarray,
    np.dtype,
    np.dtypes.UInt32DType,
    (_reconstruct, "numpy.core.multiarray._reconstruct"),  # written by NumPy 1
    _reconstruct,
]
"""What version-1 checkpoints need besides plain data: the NumPy RNG state, a ``uint32`` array (only array
rebuilding and that one numeric dtype: an object array cannot be built, so nothing of the file's choosing runs)."""


def _check_plain(value: Any, where: str) -> None:
    """Raise TypeError naming the first entry of ``value`` that is not plain data (see the module doc)."""
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN_LEAVES:
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in _PLAIN_LEAVES:
                raise TypeError(f"Checkpoint entry '{where}' has a key of type {type(key).__name__}; use str or int.")
            _check_plain(item, f"{where}.{key}" if where else str(key))
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(
        f"Checkpoint entry '{where}' is a {type(value).__module__}.{type(value).__qualname__}; checkpoints hold only "
        "tensors, dicts, lists, tuples, str, int, float, bool and None (configs via rslkit.utils.config.to_dict, "
        "arrays as tensors), so that loading one never runs code."
    )


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically and durably (a crash never leaves a half-written checkpoint).

    Raises:
        TypeError: if ``payload`` holds anything but plain data (names the entry); nothing is written then.
    """
    data = {"rslkit_checkpoint_version": CHECKPOINT_VERSION, **payload}
    _check_plain(data, "")
    with atomic_open(path) as f:
        torch.save(data, f)


def _refusal(path: Path, err: UnpicklingError) -> ValueError:
    """The error for a file the restricted unpickler refused: one naming the Python object it would have built, or
    the unreadable-file error when the file is no pickle at all."""
    text = str(err)
    marker = "GLOBAL "
    start = text.find(marker)
    if start < 0:
        return ValueError(
            f"Could not read checkpoint '{path}': it is corrupt, or holds data the safe loader does not read "
            "(nothing from it was run)."
        )
    culprit = text[start + len(marker) :].split()[0]
    return ValueError(
        f"Refused to load checkpoint '{path}': it holds the Python object {culprit}, and unpickling that could run "
        "code from the file (nothing from it was run). rslkit checkpoints hold only tensors and plain data, so this "
        "file was written by other software, crafted, or predates safe loading (rslkit checkpoints from before it "
        "still load unless they were altered); train a new run with this version of rslkit."
    )


def load_plain(path: str | Path, map_location: str | torch.device = "cpu") -> Any:
    """Read a torch file of plain data (tensors, containers, numbers, strings) with the restricted unpickler: the
    one ``torch.load`` of rslkit (checkpoints, a progress critic's optimizer state).

    Raises:
        ValueError: a corrupt file, or one holding Python objects other than plain data (refused: nothing runs).
    """
    try:
        with torch.serialization.safe_globals(_NUMERIC_NDARRAY):
            return torch.load(path, map_location=map_location, weights_only=True)
    except UnpicklingError as err:
        raise _refusal(Path(path), err) from None
    except Exception as err:  # torch raises several types for corrupt files
        raise ValueError(f"Could not read checkpoint '{path}': {err}") from err


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (with :func:`load_plain`).

    Raises:
        FileNotFoundError: if ``path`` does not exist (says where checkpoints live).
        ValueError: if the file is not an rslkit checkpoint, is corrupt, or holds Python objects other than plain
            data (refused without running anything).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"Checkpoint '{path}' does not exist. Checkpoints are written as <logdir>/<task>/<run>/model_<iter>.pt; "
            "pass one with --checkpoint, or use --resume to pick the latest run's last checkpoint."
        )
    data = load_plain(path, map_location)
    if not isinstance(data, dict) or "rslkit_checkpoint_version" not in data:
        raise ValueError(
            f"'{path}' is not an rslkit checkpoint (no 'rslkit_checkpoint_version'); rsl_rl checkpoints hold only "
            "state dicts and cannot be resumed here."
        )
    return data


def latest_checkpoint(run_dir: str | Path) -> Path:
    """The ``model_<iter>.pt`` with the highest iteration in ``run_dir``.

    Raises:
        FileNotFoundError: if the directory holds no checkpoint.
    """
    run_dir = Path(run_dir)
    files = sorted(run_dir.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]) if p.stem[6:].isdigit() else -1)
    if not files:
        raise FileNotFoundError(f"No model_<iter>.pt checkpoint in '{run_dir}'.")
    return files[-1]


def load_runner_checkpoint(
    path: str | Path, algorithm: str, map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """:func:`load_checkpoint`, checking that ``algorithm`` wrote it (:func:`check_writer`)."""
    return check_writer(load_checkpoint(path, map_location), path, algorithm)


def check_writer(data: dict[str, Any], path: str | Path, algorithm: str) -> dict[str, Any]:
    """``data`` (the checkpoint read from ``path``) if ``algorithm`` wrote it.

    Raises:
        ValueError: for a checkpoint written by another algorithm (names the ``--algo`` to use).
    """
    if data.get("algorithm") != algorithm:
        raise ValueError(
            f"Checkpoint '{path}' was written by '{data.get('algorithm')}', not by {algorithm}; "
            f"use --algo {data.get('algorithm')} with it."
        )
    return data


@contextmanager
def checkpoint_must_fit(path: str | Path) -> Iterator[None]:
    """Turn ``load_state_dict`` shape/key errors into a ValueError that says what to do.

    Raises:
        ValueError: when the checkpoint's networks do not match the ones built for this env and config.
    """
    try:
        yield
    except RuntimeError as err:
        detail = " ".join(str(err).split()[:40])
        raise ValueError(
            f"Checkpoint '{path}' does not fit this policy (different task, observation sizes or network); "
            f"train a new run or pass the matching --task and agent settings. Details: {detail}"
        ) from None
