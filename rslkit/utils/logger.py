"""Run logging: TensorBoard (default), optional Weights & Biases, ``metrics.csv``, console summary, progress bar."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm


class RunLogger:
    """Writes one row of scalar metrics per iteration to every configured sink.

    Args:
        log_dir: run directory (``metrics.csv``, TensorBoard events, config); None logs to the console only.
        total_iterations: length of the progress bar.
        start_iteration: where the bar starts (on resume).
        backends: subset of ``("tensorboard", "wandb")``.
        config: written to ``config.json`` and to W&B.
        quiet: no progress bar or console lines (non-main ranks, tests).

    The progress bar is drawn only on a terminal: in a log file (``nohup``, CI, a benchmark's child) its carriage
    returns would fill the file, so there each iteration is just its summary line.
    """

    def __init__(
        self,
        log_dir: str | Path | None,
        total_iterations: int,
        start_iteration: int = 0,
        backends: tuple[str, ...] = ("tensorboard",),
        config: dict[str, Any] | None = None,
        quiet: bool = False,
        wandb_project: str = "rslkit",
    ) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.quiet = quiet
        self._tb = None
        self._wandb = None
        self._csv_keys: list[str] = []
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._resume_csv(start_iteration)
            if config is not None:
                (self.log_dir / "config.json").write_text(json.dumps(config, indent=2, default=str))
            if "tensorboard" in backends:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.log_dir))
            if "wandb" in backends:
                try:
                    import wandb
                except ImportError as err:
                    raise ImportError("W&B logging needs `pip install wandb` (or rslkit[wandb]).") from err
                self._wandb = wandb.init(project=wandb_project, dir=str(self.log_dir), config=config)
            unknown = set(backends) - {"tensorboard", "wandb"}
            if unknown:
                raise ValueError(f"Unknown logger backend(s) {sorted(unknown)}; use 'tensorboard' and/or 'wandb'.")
        self._bar = None
        if not quiet:
            self._bar = tqdm(
                total=total_iterations,
                initial=start_iteration,
                unit="it",
                dynamic_ncols=True,
                disable=not sys.stderr.isatty(),  # summary lines still print: tqdm.write ignores disable
            )

    def log(self, iteration: int, metrics: dict[str, float], summary: str | None = None) -> None:
        """Record ``metrics`` for ``iteration`` and print ``summary`` above the progress bar."""
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, iteration)
        if self._wandb is not None:
            self._wandb.log(metrics, step=iteration)
        if self.log_dir is not None:
            self._write_csv(iteration, metrics)
        if self._bar is not None:
            if summary:
                self._bar.write(summary)
            self._bar.update(1)

    def _resume_csv(self, start_iteration: int) -> None:
        """Keep the rows of an existing ``metrics.csv`` before ``start_iteration`` (a resumed run continues it)."""
        assert self.log_dir is not None
        path = self.log_dir / "metrics.csv"
        if not path.exists():
            return
        with path.open() as f:
            reader = csv.DictReader(f)
            self._csv_keys = list(reader.fieldnames or [])
            rows = [r for r in reader if int(r["iteration"]) < start_iteration]
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._csv_keys)
            writer.writeheader()
            writer.writerows(rows)

    def _write_csv(self, iteration: int, metrics: dict[str, float]) -> None:
        assert self.log_dir is not None
        path = self.log_dir / "metrics.csv"
        row = {"iteration": iteration, **metrics}
        new_keys = [k for k in row if k not in self._csv_keys]
        if new_keys or not path.exists():
            # A metric appeared (e.g. the first finished episode): rewrite the file with the wider header.
            old_rows = []
            if path.exists():
                with path.open() as f:
                    old_rows = list(csv.DictReader(f))
            self._csv_keys += new_keys
            with path.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self._csv_keys)
                writer.writeheader()
                writer.writerows(old_rows)
                writer.writerow(row)
            return
        with path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=self._csv_keys).writerow(row)

    def close(self) -> None:
        """Flush and close every sink."""
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


SUMMARY_FIELDS = (
    ("Perf/steps_per_s", "steps/s", "{:,.0f}"),
    ("Perf/updates_per_s", "upd/s", "{:,.0f}"),  # flow-bc: gradient steps, no env
    ("Train/mean_return", "return", "{:.2f}"),
    ("Eval/mean_return", "eval", "{:.2f}"),
    ("Train/mean_episode_length", "len", "{:.1f}"),
    ("Train/success_rate", "success", "{:.2f}"),
    ("Loss/surrogate", "surr", "{:.3g}"),  # PPO, ReinFlow
    ("Loss/value", "v_loss", "{:.3g}"),  # PPO, ReinFlow; SAC's critic loss (labelled "critic")
    ("Loss/actor", "actor", "{:.3g}"),  # SAC
    ("Loss/alpha", "alpha_loss", "{:.3g}"),  # SAC temperature
    ("Policy/alpha", "alpha", "{:.3g}"),  # SAC
    ("Policy/mean_q", "Q", "{:.3g}"),  # SAC
    ("Loss/flow", "bc_loss", "{:.3g}"),  # flow-bc
    ("Loss/w2", "w2", "{:.3g}"),  # ReinFlow: distance to the pretrained policy
    ("Policy/mean_std", "std", "{:.3f}"),
    ("Loss/learning_rate", "lr", "{:.2e}"),
)
"""``(metric, label, format)`` of the console line, shown where the iteration logged the metric."""


def format_summary(iteration: int, total: int, metrics: dict[str, float]) -> str:
    """One console line with the figures a person watches during training: speed, returns, the algorithm's losses.

    Each algorithm shows its own losses (PPO: ``surr v_loss std``; SAC: ``critic actor alpha_loss alpha Q``;
    flow-bc: ``bc_loss``; ReinFlow: ``surr v_loss w2 std``); metrics an iteration did not log are left out.
    """
    parts = [f"it {iteration + 1:>5d}/{total}"]
    for key, label, fmt in SUMMARY_FIELDS:
        value = metrics.get(key)
        if value is None or math.isnan(value):
            continue
        if key == "Loss/value" and "Policy/alpha" in metrics:
            label = "critic"
        if key == "Eval/mean_return" and _close(value, metrics.get("Train/mean_return")):
            continue  # flow-bc's episode statistics are its evaluation: the same number twice
        parts.append(f"{label} {fmt.format(value)}")
    return " | ".join(parts)


def _close(a: float, b: float | None) -> bool:
    return b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(a))
