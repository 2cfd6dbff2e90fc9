"""Shared test settings and fixtures.

One intra-op thread: the tests use small batches, where OpenMP start-up and barriers cost more than they save, and
a 2-core CI machine shared with other processes makes multi-threaded tiny ops orders of magnitude slower.
"""

import csv
from collections.abc import Callable
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
