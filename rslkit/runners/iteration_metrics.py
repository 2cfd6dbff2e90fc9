"""Metrics every env-stepping runner logs per iteration: the env's own scalars and the speed figures."""

from __future__ import annotations

from typing import Any


class EnvLogMeans:
    """Averages the scalars of ``extras["log"]`` over the steps of an iteration.

    Keys with a ``/`` keep their name (``Episode_Reward/angle``); bare keys go under ``Env/``.
    """

    def __init__(self) -> None:
        self._values: dict[str, list[float]] = {}

    def add(self, log: dict[str, Any]) -> None:
        """Record one step's ``extras["log"]`` (floats or 0-d tensors)."""
        for key, value in log.items():
            self._values.setdefault(key, []).append(float(value))

    def metrics(self) -> dict[str, float]:
        """``{name: mean over the recorded steps}``."""
        out: dict[str, float] = {}
        for key, values in self._values.items():
            name = key.lstrip("/")
            out[name if "/" in name else f"Env/{name}"] = sum(values) / len(values)
        return out


def perf_metrics(steps: int, collect_time: float, learn_time: float, total_env_steps: int) -> dict[str, float]:
    """``Perf/*`` figures of an iteration of ``steps`` env steps (all ranks) that took ``collect_time`` to collect
    and ``learn_time`` to learn from, in seconds."""
    return {
        "Perf/steps_per_s": steps / max(collect_time + learn_time, 1e-9),
        "Perf/collect_time": collect_time,
        "Perf/learn_time": learn_time,
        "Perf/total_env_steps": float(total_env_steps),
    }
