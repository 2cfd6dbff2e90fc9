"""The real-world loop on a real-time pendulum: env steps and wall-clock to a mean return of -200, and system figures.

Run (results in benchmarks/results/realworld_pendulum.json; about 4 min per seed at the default budget):

    .venv/bin/python benchmarks/realworld_pendulum.py --seeds 0 1 2

Each seed is one ``python -m rslkit.realworld local --task pendulum`` run inside ``unshare -n`` (loopback only): a
learner process (SAC with the real-world defaults of ``rslkit/realworld/defaults.py``: UTD 10, batch 256, LayerNorm
critics, 1-step targets) and an actor process that paces the pendulum at its control rate (20 Hz, 200-step
episodes, a 1 s timed reset between episodes), acts randomly for its first episode, takes new weights every 20 steps
(``--actor.swap_every``) and streams every episode through its spool. Target: the mean return
of the last ``--window`` (10) episodes >= ``--threshold`` (-200), the same criterion as ``sac_vs_sb3.py`` (SB3 SAC:
median 4,601 env steps). System figures from the same runs: learner updates/s and effective UTD, the actor's idle
fraction and missed ticks, weight-push latency p50/p99 and the cost of a spool append.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "realworld_pendulum.json"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run_seed(seed: int, steps: int, logdir: Path, extra: list[str]) -> Path:
    """One local run; returns its run directory."""
    run_name = f"bench_s{seed}"
    cmd = [
        sys.executable, "-m", "rslkit.realworld", "local", "--task", "pendulum", "--seed", str(seed),
        "--logdir", str(logdir), "--run_name", run_name, "--max_iterations", "100000",
        "--actor.max_env_steps", str(steps), "--agent.logger", "", *extra,
    ]  # fmt: skip
    lo_up = f"{sys.executable} {ROOT / 'tests' / 'ros2' / 'lo_up.py'}"
    quoted = " ".join(f"'{c}'" for c in cmd)
    full = ["unshare", "-n", "sh", "-c", f"{lo_up} && {quoted}"] if shutil.which("unshare") else cmd
    out = logdir / f"{run_name}.log"
    with out.open("w") as f:
        subprocess.run(full, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=steps * 0.2 + 600)
    runs = sorted((logdir / "pendulum").glob(f"*_realworld_{run_name}"))
    return runs[-1]


def analyse(run_dir: Path, threshold: float, window: int) -> dict[str, Any]:
    """Steps and seconds to the threshold from the actor's episodes.csv; system figures from the summaries."""
    with (run_dir / "actor-0" / "episodes.csv").open() as f:
        episodes = list(csv.DictReader(f))
    returns = [float(e["return"]) for e in episodes]
    reached_steps = reached_s = None
    elapsed = 0.0
    for i, e in enumerate(episodes):
        elapsed += float(e["wall_s"])
        last = returns[max(0, i + 1 - window) : i + 1]
        if len(last) == window and sum(last) / window >= threshold:
            reached_steps, reached_s = int(e["env_steps"]), elapsed
            break
    summary = json.loads((run_dir / "actor-0" / "summary.json").read_text())
    with (run_dir / "metrics.csv").open() as f:
        metrics = list(csv.DictReader(f))
    last = metrics[-1]
    busy = [float(m["Perf/updates_per_s"]) for m in metrics if float(m.get("Perf/updates") or 0) > 0]
    return {
        "run_dir": str(run_dir),
        "reached_env_steps": reached_steps,
        "reached_s": reached_s,
        "episodes": len(episodes),
        "env_steps": summary["env_steps"],
        "final_mean_return": sum(returns[-window:]) / min(window, len(returns)),
        "returns": returns,
        "learner_updates": float(last["Perf/total_updates"]),
        "effective_utd": float(last["Perf/total_updates"]) / max(float(last["Perf/total_env_steps"]), 1.0),
        "learner_updates_per_s_median": sorted(busy)[len(busy) // 2] if busy else None,
        "actor_idle_fraction": summary["idle_fraction"],
        "missed_ticks": summary["robot"]["missed_ticks"],
        "ticks": summary["robot"]["ticks"],
        "push_latency_s": summary["push_latency_s"],
        "spool_append_s": summary["spool_append_s"],
        "weight_swaps": summary["weight_swaps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=4000, help="actor env steps per seed (20 Hz: 200 s)")
    parser.add_argument("--threshold", type=float, default=-200.0)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--logdir", default="/tmp/rslkit_bench_realworld")
    parser.epilog = C.TRAIN_FLAGS_HELP
    own, extra = C.split_train_flags()
    args = parser.parse_args(own)
    logdir = Path(args.logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "command": " ".join(sys.argv),
        "seeds": {},
    }
    for seed in args.seeds:
        t0 = time.time()
        run_dir = run_seed(seed, args.steps, logdir, extra)
        result = analyse(run_dir, args.threshold, args.window)
        result["total_s"] = time.time() - t0
        results["seeds"][str(seed)] = result
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1))  # after every seed: a cut session keeps what finished
        print(
            f"seed {seed}: reached at {result['reached_env_steps']} env steps ({result['reached_s']} s); final "
            f"{result['final_mean_return']:.0f}; UTD {result['effective_utd']:.1f}; missed ticks "
            f"{result['missed_ticks']:.0f}; push p50 {result['push_latency_s']['p50']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
