"""Plot a go2-flat run's learning curve (survival and planar velocity tracking error vs wall-clock minutes).

Reads the run's ``metrics.csv`` (written by ``train.py``); the time axis is the cumulative collection + update time
of the iterations (logging and checkpoint writes excluded, a few seconds over a run).

Usage: ``python benchmarks/go2_curve.py logs/go2-flat/<run>/metrics.csv --out docs/img/go2_flat_curve.png``.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _smooth(values: list[float], k: int) -> list[float]:
    """Trailing mean over ``k`` points (the metrics of single iterations are noisy)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= k:
            acc -= values[i - k]
        out.append(acc / min(i + 1, k))
    return out


def load(path: Path) -> dict[str, list[float]]:
    """Minutes, survival and tracking errors per iteration (survival carried forward where no episode ended)."""
    minutes, survival, lin_err, ang_err = [], [], [], []
    elapsed, last_survival = 0.0, float("nan")
    for row in csv.DictReader(path.open()):
        elapsed += float(row["Perf/collect_time"]) + float(row["Perf/learn_time"])
        minutes.append(elapsed / 60.0)
        if row.get("Metrics/survival"):
            last_survival = float(row["Metrics/survival"])
        survival.append(last_survival)
        lin_err.append(float(row["Metrics/lin_vel_error"]))
        ang_err.append(float(row["Metrics/ang_vel_error"]))
    return {"minutes": minutes, "survival": survival, "lin_vel_error": lin_err, "ang_vel_error": ang_err}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/img/go2_flat_curve.png"))
    parser.add_argument("--smooth", type=int, default=10, help="iterations averaged per point")
    args = parser.parse_args(argv)
    d = load(args.metrics)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3), dpi=80)
    ax1.plot(d["minutes"], _smooth(d["lin_vel_error"], args.smooth), label="planar |v* - v| (m/s)")
    ax1.plot(d["minutes"], _smooth(d["ang_vel_error"], args.smooth), label="yaw |w* - w| (rad/s)", alpha=0.6)
    ax1.axhline(0.2, color="k", ls="--", lw=0.8, label="goal 0.2 m/s")
    ax1.set_xlabel("wall-clock minutes")
    ax1.set_ylabel("tracking error")
    ax1.legend(fontsize=7)
    ax2.plot(d["minutes"], _smooth(d["survival"], args.smooth), color="tab:green")
    ax2.axhline(0.95, color="k", ls="--", lw=0.8)
    ax2.set_ylim(0.0, 1.02)
    ax2.set_xlabel("wall-clock minutes")
    ax2.set_ylabel("episodes without a fall")
    fig.suptitle("go2-flat PPO, stochastic policy during training (2 shared CPU cores)", fontsize=9)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
