"""go2-flat PPO with symmetry (augmentation and mirror loss) and RND on: the metrics are logged, resume is exact,
and the same seed gives the same run with 1 or 2 torch threads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rslkit.envs.mujoco.models import ModelNotFoundError
from rslkit.recipes import build_run, load_run
from rslkit.utils.checkpoint import load_checkpoint
from tests.runners.test_resume_all_tasks import COMMON, TINY, _differences

ON = [
    "--agent.algorithm.symmetry_cfg.use_data_augmentation=true",
    "--agent.algorithm.symmetry_cfg.use_mirror_loss=true",
    "--agent.algorithm.symmetry_cfg.mirror_loss_coeff=0.5",
    "--agent.algorithm.symmetry_cfg.data_augmentation_func=go2",
    "--agent.algorithm.rnd_cfg.weight=2.0",
    "--agent.algorithm.rnd_cfg.predictor_hidden_dims=16",
    "--agent.algorithm.rnd_cfg.target_hidden_dims=16",
]


def _build(out: Path, iterations: int = 4):
    try:
        return build_run("go2-flat", "ppo", [*COMMON, *TINY["ppo"], "--env.sim_threads=1", *ON], num_envs=4,
                         max_iterations=iterations, log_dir=out)  # fmt: skip
    except ModelNotFoundError as err:
        pytest.skip(f"go2-flat: robot model missing ({err}); run `make models`")


def _untimed(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith("Perf/")}


def test_resume_is_exact_with_symmetry_and_rnd(tmp_path: Path) -> None:
    _, straight = _build(tmp_path / "straight")
    expected = straight.learn()
    for key in ("Loss/symmetry", "Loss/rnd", "RND/mean_intrinsic_reward"):
        assert key in expected and expected[key] > 0, key
    _, part = _build(tmp_path / "resumed")
    part.learn(2)
    _, resumed, _ = load_run(tmp_path / "resumed" / "model_2.pt", resume=True, max_iterations=4)
    got = resumed.learn()
    a = load_checkpoint(tmp_path / "straight" / "model_4.pt")
    b = load_checkpoint(tmp_path / "resumed" / "model_4.pt")
    assert "rnd" in a["alg"] and "rnd_optimizer" in a["alg"]
    diffs = _differences(a, b, "checkpoint") + _differences(_untimed(expected), _untimed(got), "metrics")
    assert not diffs, "\n".join(diffs)


def test_same_seed_same_run_whatever_the_thread_count(tmp_path: Path) -> None:
    runs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        try:
            _, runner = _build(tmp_path / str(threads), iterations=2)
            runs.append((_untimed(runner.learn()), load_checkpoint(tmp_path / str(threads) / "model_2.pt")))
        finally:
            torch.set_num_threads(1)
    (m1, c1), (m2, c2) = runs
    diffs = _differences(c1["alg"], c2["alg"], "alg") + _differences(m1, m2, "metrics")
    assert not diffs, "\n".join(diffs)
