"""Learning curve of a ``so101-lift`` run (PPO or SAC): reward terms, success rate and wall time per iteration.

Train first (bounded in time), then summarize the run's ``metrics.csv``::

    timeout 1800 .venv/bin/python train.py --task so101-lift --algo sac --threads 1 --logdir /tmp/lift
    .venv/bin/python benchmarks/so101_lift_curve.py /tmp/lift/so101-lift/<run> --name so101_lift_sac_curve

Writes ``benchmarks/results/<name>.json`` and a plot ``<name>.png`` beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from _common import RESULTS_DIR, machine_info, write_results

TERMS = ("reach", "grasp", "lift", "success")
"""Per-episode sums of these reward terms are plotted (their per-step maxima: 1, 2, 10, 10 with the defaults)."""


def load_curve(run_dir: Path) -> list[dict[str, float]]:
    """One row per iteration: iteration, cumulative env steps and seconds, term sums, success rate, length."""
    rows, elapsed = [], 0.0
    with open(run_dir / "metrics.csv") as f:
        for r in csv.DictReader(f):
            elapsed += float(r["Perf/collect_time"]) + float(r["Perf/learn_time"])
            row = {"iteration": int(r["iteration"]), "env_steps": float(r["Perf/total_env_steps"]), "seconds": elapsed}
            for term in TERMS:
                row[term] = float(r[f"Episode_Reward/{term}"] or "nan")
            row["success_rate"] = float(r["Train/success_rate"] or "nan")
            row["episode_length"] = float(r["Train/mean_episode_length"] or "nan")
            rows.append(row)
    return rows


def plot(rows: list[dict[str, float]], path: Path, title: str) -> None:
    """Term sums per episode (left) and success rate (right) against wall-clock minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [r["seconds"] / 60 for r in rows]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.2))
    for term in TERMS:
        ax0.plot(minutes, [r[term] for r in rows], label=term)
    ax0.set(xlabel="wall-clock minutes (2 shared CPU cores)", ylabel="reward term, sum per episode")
    ax0.legend()
    ax1.plot(minutes, [r["success_rate"] for r in rows])
    ax1.set(xlabel="wall-clock minutes", ylabel="success rate (cube up 5 cm)", ylim=(-0.02, 1.02))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a train.py run directory (holds metrics.csv and config.json)")
    parser.add_argument("--name", default="so101_lift_curve", help="file name of the JSON and the plot")
    args = parser.parse_args()
    rows = load_curve(args.run_dir)
    config = json.loads((args.run_dir / "config.json").read_text())
    algo = "SAC" if "replay" in config["agent"] else "PPO"
    title = f"so101-lift, {algo}, {config['env_cfg']['num_envs']} envs"
    payload = {"machine": machine_info(["torch", "mujoco"]), "run_dir": str(args.run_dir), "curve": rows}
    print(f"wrote {write_results(args.name, payload)}")
    plot(rows, RESULTS_DIR / f"{args.name}.png", title)
    for r in rows[:: max(1, len(rows) // 8)] + rows[-1:]:
        terms = " ".join(f"{t} {r[t]:6.2f}" for t in TERMS)
        print(f"it {r['iteration']:4d} | {r['seconds'] / 60:5.1f} min | {terms} | success {r['success_rate']:.2f}")


if __name__ == "__main__":
    main()
