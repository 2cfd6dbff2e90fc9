"""train.py / play.py end to end: help, errors, learning, resume, evaluation."""

import subprocess
import sys
from pathlib import Path

import pytest

from rslkit.cli import play, train

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_registered_tasks():
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "registered tasks:" in out and "pendulum" in out and "--num_envs" in out


def test_unknown_task_suggests_close_matches():
    with pytest.raises(ValueError, match="Unknown task 'pendulm'. Did you mean: pendulum"):
        train.main(["--task", "pendulm"])


def test_bad_override_exits_with_message(capsys):
    with pytest.raises(SystemExit):
        train.main(["--task", "pendulum", "--agent.algorithm.gama", "0.9", "--logdir", "/nonexistent"])
    assert "Did you mean: algorithm.gamma" in capsys.readouterr().err


def test_resume_needs_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="--resume found no run"):
        train.main(["--task", "pendulum", "--resume", "--logdir", str(tmp_path)])


def test_pendulum_learns_then_play_and_resume(tmp_path, capsys):
    """PPO on pendulum reaches a mean return >= -250 (Gymnasium Pendulum-v1 scale) in well under a minute."""
    runner = train.main(["--task", "pendulum", "--logdir", str(tmp_path), "--max_iterations", "40", "--seed", "1"])
    assert runner.stats.summary()["Train/mean_return"] >= -250
    run_dir = next((tmp_path / "pendulum").iterdir())
    ckpt = run_dir / "model_40.pt"
    stats = play.main(["--task", "pendulum", "--checkpoint", str(ckpt), "--episodes", "64"])
    assert stats["return_mean"] >= -250 and stats["episodes"] == 64
    assert "64 episodes | return" in capsys.readouterr().out
    resumed = train.main(["--task", "pendulum", "--logdir", str(tmp_path), "--resume", "--max_iterations", "42"])
    assert resumed.iteration == 42 and (run_dir / "model_42.pt").exists()
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 42 and rows[-1].startswith("41,")
    with pytest.raises(ValueError, match="trained on task 'pendulum'"):
        play.main(["--task", "cartpole", "--checkpoint", str(ckpt)])
