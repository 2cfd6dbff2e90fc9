"""Atomic file replacement: the old content survives a failed write, no temporary file is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rslkit.utils.atomic_write import atomic_open, atomic_write_bytes, atomic_write_json


def test_writes_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    atomic_write_json(path, {"b": 1, "a": 2})
    assert path.read_text() == '{"a": 2, "b": 1}'
    atomic_write_bytes(path, b"new", durable=False)
    assert path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    atomic_write_json(path, {"v": 1})
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write(b"half")
        raise RuntimeError("crash in the middle")
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
