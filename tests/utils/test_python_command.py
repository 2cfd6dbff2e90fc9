"""Printed commands name the interpreter so that they work when pasted (no `No module named 'torch'`)."""

from __future__ import annotations

import os

from rslkit.utils.python_command import python_command


def test_a_venv_below_the_current_directory_is_named_relative(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    exe = tmp_path / ".venv" / "bin" / "python"
    assert python_command(str(exe), tmp_path) == os.path.join(".venv", "bin", "python")
    assert python_command(str(tmp_path / "python"), tmp_path) == os.path.join(".", "python")
    assert python_command(str(exe), tmp_path / "elsewhere") == str(exe)


def test_the_python_on_path_is_plain_python(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "python"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # an activated venv
    assert python_command(str(exe), tmp_path) == "python"
