"""How to spell "this Python" in a command printed for a person to copy (``.venv/bin/python -m rslkit.plot ...``)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def python_command(executable: str | None = None, cwd: str | Path | None = None) -> str:
    """The interpreter running rslkit, as a command that works when pasted into a shell at ``cwd``.

    ``python`` when that is what the shell finds first (an activated venv), else the path relative to ``cwd`` when
    the interpreter lives below it (``.venv/bin/python``), else its absolute path. A bare ``python`` would fail
    with ``No module named 'torch'`` outside the venv.

    Args:
        executable: the interpreter (default: :data:`sys.executable`).
        cwd: where the command will be run (default: the current directory).
    """
    exe = Path(executable or sys.executable)
    # Paths are compared unresolved: a venv's python links to the system one, and the venv's path is what counts.
    absolute = os.path.abspath(exe)
    on_path = shutil.which("python")
    if on_path is not None and os.path.abspath(on_path) == absolute:
        return "python"
    relative = os.path.relpath(absolute, os.path.abspath(cwd or os.getcwd()))
    if relative.startswith(os.pardir):
        return absolute
    return relative if os.sep in relative else os.path.join(os.curdir, relative)
