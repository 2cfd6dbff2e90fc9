"""The per-iteration metrics every env-stepping runner shares."""

import pytest
import torch

from rslkit.runners.iteration_metrics import EnvLogMeans, perf_metrics


def test_env_log_means_average_per_key_and_name_bare_keys_under_env() -> None:
    log = EnvLogMeans()
    log.add({"Episode_Reward/angle": torch.tensor(-1.0), "survival": 1.0})
    log.add({"Episode_Reward/angle": torch.tensor(-3.0), "survival": 0.0, "/Curriculum/level": 2})
    assert log.metrics() == {"Episode_Reward/angle": -2.0, "Env/survival": 0.5, "Curriculum/level": 2.0}
    assert EnvLogMeans().metrics() == {}


def test_perf_metrics() -> None:
    perf = perf_metrics(steps=1000, collect_time=0.3, learn_time=0.2, total_env_steps=5000)
    assert perf["Perf/steps_per_s"] == pytest.approx(2000.0)
    assert (perf["Perf/collect_time"], perf["Perf/learn_time"], perf["Perf/total_env_steps"]) == (0.3, 0.2, 5000.0)
