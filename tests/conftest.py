"""Shared test settings and fixtures.

One intra-op thread: the tests use small batches, where OpenMP start-up and barriers cost more than they save, and
a 2-core CI machine shared with other processes makes multi-threaded tiny ops orders of magnitude slower.
"""

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def metric_curve() -> Callable[..., list[float]]:
    """``metric_curve(run_dir, key="Train/mean_return")``: the per-iteration values of ``key`` in a run's
    ``metrics.csv`` (iterations that did not log it are skipped).

    Learning tests assert on the curve (its best value, a trailing mean), never on one iteration: float results
    differ between CPU families (AVX-512 vs AVX2 kernels), so a seed's exact trajectory is not reproducible across
    CI machines, and the last iteration is a run's noisiest figure.
    """

    def read(run_dir: str | Path, key: str = "Train/mean_return") -> list[float]:
        with open(Path(run_dir) / "metrics.csv", newline="") as f:
            return [float(row[key]) for row in csv.DictReader(f) if row.get(key)]

    return read


@pytest.fixture
def learn_until(metric_curve) -> Callable[..., list[float]]:
    """``learn_until(task, log_dir, goal, max_iterations, key=..., overrides=(), every=4, num_envs=None)``: train
    ``task``'s PPO recipe (seed 0) in blocks of ``every`` iterations until ``goal(curve)`` holds for the curve of
    ``key`` or ``max_iterations`` have run; returns the curve.

    A learning test asks whether the goal is reached within a budget, so it stops as soon as it is (a run split into
    blocks is the run in one piece: resume is exact).
    """

    def run(
        task: str,
        log_dir: Path,
        goal: Callable[[list[float]], bool],
        max_iterations: int,
        key: str = "Train/mean_return",
        overrides: Sequence[str] = (),
        every: int = 4,
        num_envs: int | None = None,
    ) -> list[float]:
        from rslkit.recipes import build_run

        _, runner = build_run(
            task, "ppo", list(overrides), num_envs=num_envs, seed=0, max_iterations=max_iterations, log_dir=log_dir
        )
        curve: list[float] = []
        while runner.iteration < max_iterations and not goal(curve):
            runner.learn(min(every, max_iterations - runner.iteration))
            curve = metric_curve(runner.log_dir, key)
        return curve

    return run
