"""Rendering tests need a headless OpenGL library; CI has one (the Makefile installs OSMesa), so there a missing
one is an error, elsewhere a skip with the reason."""

from __future__ import annotations

import os

import pytest

from rslkit.envs.mujoco import render


def require_gl() -> None:
    """Skip where no headless GL library is installed, except in CI."""
    try:
        render.gl_backend()
    except render.RenderingUnavailableError as err:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(err))
