"""Atomic, durable file replacement: write a temporary file beside the target, fsync it, rename it over, fsync the
directory. A crash leaves the old file or the new one, never half of either. Torch-free."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def fsync_dir(directory: str | Path) -> None:
    """Make a rename or a new file in ``directory`` durable (POSIX: the directory entry is data of its own)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_open(path: str | Path, *, durable: bool = True) -> Iterator[IO[bytes]]:
    """A binary file to write that replaces ``path`` when the ``with`` block ends without an exception.

    Args:
        path: the file to replace; its parent directory is created.
        durable: fsync the file and the directory (False for files that may be lost in a power cut, e.g. logs).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, durable=durable) as f:
        f.write(data)


def atomic_write_json(path: str | Path, obj: Any, *, durable: bool = True, indent: int | None = None) -> None:
    """Replace ``path`` with ``obj`` as JSON (sorted keys) atomically (see :func:`atomic_open`)."""
    atomic_write_bytes(path, json.dumps(obj, sort_keys=True, indent=indent).encode(), durable=durable)
