"""Atomic checkpoint files: write to a temporary file, then rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_VERSION = 1


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (a crash never leaves a half-written checkpoint)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"rslkit_checkpoint_version": CHECKPOINT_VERSION, **payload}, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises:
        FileNotFoundError: if ``path`` does not exist (says where checkpoints live).
        ValueError: if the file is not an rslkit checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"Checkpoint '{path}' does not exist. Checkpoints are written as <logdir>/<task>/<run>/model_<iter>.pt; "
            "pass one with --checkpoint, or use --resume to pick the latest run's last checkpoint."
        )
    try:
        data = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:  # torch raises several types for corrupt files
        raise ValueError(f"Could not read checkpoint '{path}': {err}") from err
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
    """:func:`load_checkpoint`, checking that ``algorithm`` wrote it.

    Raises:
        ValueError: for a checkpoint written by another algorithm (names the ``--algo`` to use).
    """
    data = load_checkpoint(path, map_location)
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
