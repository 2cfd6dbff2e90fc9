"""The block printed when :meth:`BaseRunner.learn` ends: how the run went and where its results are."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from rslkit.utils.python_command import python_command

TRACKED = (
    ("return", ("Eval/mean_return", "Train/mean_return")),
    ("success rate", ("Eval/success_rate", "Train/success_rate")),
)
"""Figures reported as final and best, each from the first of its metrics the run logged (evaluation first: it is
deterministic, and flow-bc's episode statistics are its evaluations)."""

ENV_STEPS = "Perf/total_env_steps"


class RunSummary:
    """Observes each iteration's metrics and formats the end-of-run summary.

    Args:
        start_iteration: the runner's iteration when :meth:`learn` started (not 0 on resume).
        clock: seconds, for the wall time (a fake in tests).
    """

    def __init__(self, start_iteration: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.start_iteration = start_iteration
        self.end_iteration = start_iteration
        self.env_steps: float | None = None
        self.final: dict[str, tuple[float, int]] = {}
        """metric -> (value, iteration) of its last logged value."""
        self.best: dict[str, tuple[float, int]] = {}
        """metric -> (value, iteration) of its highest logged value."""
        self._clock = clock
        self._t0 = clock()

    def observe(self, iteration: int, metrics: dict[str, float]) -> None:
        """Take the metrics of ``iteration`` (0-based, as logged)."""
        self.end_iteration = iteration + 1
        for _, keys in TRACKED:
            for key in keys:
                value = metrics.get(key)
                if value is None or math.isnan(value):
                    continue
                self.final[key] = (value, iteration)
                if key not in self.best or value > self.best[key][0]:
                    self.best[key] = (value, iteration)
        steps = metrics.get(ENV_STEPS)
        if steps is not None and not math.isnan(steps):
            self.env_steps = steps

    def format(self, checkpoint: str | Path | None = None, interrupted: bool = False) -> str:
        """The summary block.

        Args:
            checkpoint: the last checkpoint written (None when the run writes no files).
            interrupted: the run stopped early on Ctrl-C / SIGTERM.
        """
        done = self.end_iteration - self.start_iteration
        head = "Training stopped early (Ctrl-C / SIGTERM)" if interrupted else "Training finished"
        run = f"{done} iteration{'s' if done != 1 else ''}"
        if self.start_iteration:
            run += f" ({self.start_iteration} -> {self.end_iteration})"
        if self.env_steps is not None:
            run += f", {self.env_steps:,.0f} env steps"
        lines = [f"{head} " + "-" * max(3, 60 - len(head)), f"  {'run':<14}{run} in {format_seconds(self.elapsed)}"]
        for label, keys in TRACKED:
            key = next((k for k in keys if k in self.final), None)
            if key is None:
                continue
            (last, last_it), (best, best_it) = self.final[key], self.best[key]
            name = f"eval {label.split()[0]}" if key.startswith("Eval/") else label  # "eval success": fits the column
            lines.append(f"  {name:<14}final {last:.4g} (it {last_it + 1}) | best {best:.4g} (it {best_it + 1})")
        if checkpoint is not None:
            path = Path(checkpoint)
            lines.append(f"  {'checkpoint':<14}{path}")
            lines.append(f"  {'curves':<14}{python_command()} -m rslkit.plot {path.parent}")
        return "\n".join(lines)

    @property
    def elapsed(self) -> float:
        """Seconds since the summary was created (the start of :meth:`learn`)."""
        return self._clock() - self._t0


def format_seconds(seconds: float) -> str:
    """``42.3 s``, ``3 min 12 s``, ``2 h 05 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
