"""Offscreen rendering: GL backend choice and its error, frames of so101-reach / so101-lift that follow the state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rslkit.envs.mujoco import render
from rslkit.envs.mujoco.models import ModelNotFoundError, load_so101_lift, load_so101_visual, so101_model_dir
from tests.envs.gl import require_gl

try:
    so101_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)


def test_gl_backend_follows_mujoco_gl(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert render.gl_backend() == "egl"
    monkeypatch.setenv("MUJOCO_GL", "OSMesa")
    assert render.gl_backend() == "osmesa"


def test_missing_gl_library_says_what_to_install(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    monkeypatch.setattr(render.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(render.RenderingUnavailableError, match="apt-get install -y libosmesa6"):
        render.gl_backend()


def test_bad_camera_and_state_layout_are_clear_errors():
    from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask

    env = SO101ReachTask(SO101ReachCfg(num_envs=2, sim_threads=1))
    with pytest.raises(ValueError, match="state values per env"):
        render.BackendRenderer(load_so101_lift(visual=True), env.backend)
    with pytest.raises(ValueError, match="has no camera 'top'"):
        render.Renderer(load_so101_visual(), 32, 24, camera="top")


@pytest.mark.slow
def test_reach_frames_follow_each_envs_state():
    require_gl()
    from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask

    env = SO101ReachTask(SO101ReachCfg(num_envs=2, sim_threads=1))
    assert isinstance(env, render.RenderableTask) and env.step_dt == pytest.approx(0.02)
    env.backend.qpos[1] = env.backend.qpos[0]  # same arm pose in both envs, different targets
    env.backend.forward()
    first = env.render_frame(0, 64, 48)
    assert first.shape == (48, 64, 3) and first.dtype == np.uint8 and first.std() > 5
    assert np.array_equal(first, env.render_frame(0, 64, 48))  # rendering is deterministic
    assert not np.array_equal(first, env.render_frame(1, 64, 48))  # the target marker moved
    env.backend.qpos[0, :5] += 0.5
    env.backend.forward()
    assert not np.array_equal(first, env.render_frame(0, 64, 48))  # the arm moved


@pytest.mark.slow
def test_lift_frame_shows_the_cube_moving():
    require_gl()
    from rslkit.envs.tasks.so101_lift import SO101LiftCfg, SO101LiftTask

    env = SO101LiftTask(SO101LiftCfg(num_envs=1, sim_threads=1))
    before = env.render_frame(0, 64, 48)
    env.backend.qpos[0, env._cube_qpos + 1] += 0.05
    env.backend.forward()
    after = env.render_frame(0, 64, 48)
    assert before.shape == (48, 64, 3) and not np.array_equal(before, after)
    with pytest.raises(ValueError, match="out of range"):
        env.render_frame(1, 64, 48)
    env.step(torch.zeros(1, 6))
    env.close()
