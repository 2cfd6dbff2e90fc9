"""``play.py --video``: an mp4 of a rollout that decodes to the expected frames; clear errors for bad requests."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rslkit.cli import play, train
from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir
from rslkit.envs.mujoco.render import RenderingUnavailableError, gl_backend

try:
    so101_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)


@pytest.fixture(scope="module")
def reach_checkpoint(tmp_path_factory) -> str:
    """A one-iteration so101-reach checkpoint (the policy's quality does not matter here)."""
    logdir = tmp_path_factory.mktemp("logs")
    args = ["--task", "so101-reach", "--num_envs", "4", "--max_iterations", "1", "--logdir", str(logdir)]
    train.main([*args, "--agent.num_steps_per_env", "4", "--env.sim_threads", "1"])
    return str(next((logdir / "so101-reach").iterdir()) / "model_1.pt")


def test_video_of_a_rollout_decodes_with_the_expected_frames(reach_checkpoint, tmp_path, capsys):
    try:
        gl_backend()
    except RenderingUnavailableError as err:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(err))
    import imageio.v3 as iio

    path = tmp_path / "videos" / "reach.mp4"
    args = ["--task", "so101-reach", "--checkpoint", reach_checkpoint, "--episodes", "2", "--video", str(path)]
    play.main([*args, "--video_length", "6", "--video_size", "64x48", "--env.sim_threads", "1"])
    assert f"Wrote {path} (4 frames at 25 fps" in capsys.readouterr().out  # 50 Hz control, every 2nd step + reset
    frames = iio.imread(path, plugin="FFMPEG")
    assert frames.shape == (4, 48, 64, 3) and frames.dtype == np.uint8
    assert frames.std() > 5  # a picture, not a blank frame


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--video", "out.avi"], "must name an .mp4 file"),
        (["--video", "out.mp4", "--video_size", "65x48"], "even sizes"),
        (["--video", "out.mp4", "--video_size", "big"], "WIDTHxHEIGHT"),
        (["--video", "out.mp4", "--video_length", "0"], "--video_length must be >= 1"),
    ],
)
def test_bad_video_flags_exit_with_a_message(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:  # checked before the checkpoint is read
        play.main(["--task", "so101-reach", "--checkpoint", "missing.pt", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_task_without_render_hook_is_a_clear_error(tmp_path):
    class NoHook:
        num_envs, device = 1, "cpu"

    with pytest.raises(ValueError, match="cannot render"):
        play.record_video(None, NoHook(), tmp_path / "x.mp4", steps=1)


def test_training_a_renderable_task_ends_with_how_to_watch_it(tmp_path, capsys):
    class Renderable:
        def render_frame(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
            return np.zeros((height, width, 3), np.uint8)

    for it in (5, 10):
        (tmp_path / f"model_{it}.pt").write_bytes(b"")
    train.print_watch_hint(Renderable(), tmp_path)
    out = capsys.readouterr().out
    assert f"play.py --checkpoint {tmp_path / 'model_10.pt'} --video {tmp_path / 'rollout.mp4'}" in out
    train.print_watch_hint(object(), tmp_path)
    assert capsys.readouterr().out == ""
