"""Asynchronous PPO with bounded staleness: naive PPO on stale data vs decoupled PPO vs M2PO, in the real loop.

Each run is ``python -m rslkit.realworld local --algo ppo``: one learner and ``--actors`` actor processes (batched
simulated envs, gRPC on loopback) on this machine, rollouts admitted by AReaL's rule with maximum staleness eta.
``sync`` is eta = 0 in the same loop (synchronous PPO: actors wait for every update); ``naive``, ``decoupled`` and
``m2po`` run at each eta of ``--etas``. Every row makes the same number of updates of the same size (``--actors x
--num_envs x 24`` samples), so rows compare at equal env steps. Optionally ``train`` is plain ``train.py`` PPO in one
process with ``--actors x --num_envs`` envs (the synchronous single-process reference on the same cores).

Reported per row: success of the deterministic final policy on ``--eval-episodes`` fresh episodes, the training
return and success at the end, wall-clock of the run, wall-clock until the training success first reaches
``--target``, env steps, and the staleness statistics (mean, max, masked fraction, behaviour-weight mean).

The learning rate is ``fixed`` by default (``--schedule``, ``--lr`` 5e-4): in ppo_staleness.json the KL-adaptive
schedule sank to its floor in every eta = 8 run, the decoupled ones included, which confounds the objective with the
schedule; 5e-4 is about where sync PPO's adaptive rate sat there (figures: docs/benchmarks.md, section 13,
``ppo_staleness.py``).

Run (results in benchmarks/results/ppo_async.json, written after every run; about 15-20 min for the 6 rows of one
seed on 2 busy cores: ~1 s per iteration at eta 2)::

    .venv/bin/python benchmarks/ppo_async.py
    .venv/bin/python benchmarks/ppo_async.py --quick   # smoke run: point-reach, 3 rows, ~2 min
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

CONFIGS = ("sync", "naive", "decoupled", "m2po", "train")
ROWS = ("sync@0", "naive@2", "naive@8", "decoupled@2", "decoupled@8", "m2po@8")
STALENESS = {
    "sync": [],
    "naive": [],
    "decoupled": ["--agent.algorithm.staleness.objective", "decoupled"],
    "m2po": ["--agent.algorithm.staleness.m2_threshold", "0.04"],
    "train": [],
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter, epilog=C.TRAIN_FLAGS_HELP
    )
    p.add_argument("--task", default="so101-reach")
    p.add_argument("--rows", nargs="+", default=list(ROWS), help="CONFIG@ETA, CONFIG one of " + ", ".join(CONFIGS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--num_envs", type=int, default=256, help="envs per actor")
    p.add_argument("--schedule", choices=("fixed", "adaptive"), default="fixed")
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate (the start of an adaptive schedule)")
    p.add_argument("--target", type=float, default=0.8, help="training success whose first crossing is timed")
    p.add_argument("--eval-episodes", type=int, default=256)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run at most")
    p.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ppo_async.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: point-reach, 2 x 32 envs, 8 iterations")
    own, args_extra = C.split_train_flags()
    args = p.parse_args(own)
    args.extra = args_extra  # e.g. `-- --agent.algorithm.num_learning_epochs 20` (a slower learner: actors run ahead)
    if args.quick:
        args.task, args.iterations, args.num_envs, args.eval_episodes = "point-reach", 8, 32, 64
        args.rows = ["sync@0", "naive@2", "decoupled@2"]
        args.out = args.out or str(C.RESULTS_DIR / "ppo_async_quick.json")
    return args


def _overrides(args: argparse.Namespace, config: str) -> list[str]:
    over = ["--agent.algorithm.schedule", args.schedule, "--agent.algorithm.learning_rate", str(args.lr)]
    over += STALENESS[config] + args.extra
    if args.task.startswith("so101"):
        over += ["--env.sim_threads", "1"]
    return over


def _command(args: argparse.Namespace, spec: dict[str, Any], logdir: Path) -> list[str]:
    if spec["config"] == "train":
        return [sys.executable, str(C.REPO_ROOT / "train.py"), "--task", args.task, "--num_envs",
                str(args.actors * args.num_envs), "--max_iterations", str(args.iterations), "--seed", str(spec["seed"]),
                "--logdir", str(logdir), *_overrides(args, "train")]  # fmt: skip
    return [sys.executable, "-m", "rslkit.realworld", "local", "--task", args.task, "--algo", "ppo",
            "--learner.rollouts_per_update", str(args.actors), "--learner.actor_envs", str(args.num_envs),
            "--learner.max_staleness", str(spec["eta"]),
            "--max_iterations", str(args.iterations), "--seed", str(spec["seed"]), "--logdir", str(logdir),
            *_overrides(args, spec["config"])]  # fmt: skip


def _rows(metrics_csv: Path) -> list[dict[str, float]]:
    with open(metrics_csv) as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]


def _time_to_target(rows: list[dict[str, float]], target: float) -> float | None:
    """Wall seconds (the learner's ``Perf/wall_s``, or summed iteration times of train.py) to training success."""
    elapsed = 0.0
    for row in rows:
        elapsed = row.get("Perf/wall_s", elapsed + row.get("Perf/collect_time", 0.0) + row.get("Perf/learn_time", 0.0))
        if row.get("Train/success_rate", 0.0) >= target:
            return elapsed
    return None


def evaluate(checkpoint: Path, task: str, episodes: int) -> float:
    """Success of the checkpoint's deterministic policy on ``episodes`` fresh episodes (one per env)."""
    from rslkit.recipes import load_run

    env, runner, _ = load_run(checkpoint, num_envs=episodes, seed=12345)
    rate = C.success_rate(env, runner)
    getattr(env, "close", lambda: None)()
    return rate


def run(args: argparse.Namespace, spec: dict[str, Any], logdir: Path) -> dict[str, Any]:
    """One row: the run, then the evaluation of its last checkpoint."""
    t0 = time.perf_counter()
    done = subprocess.run(_command(args, spec, logdir), capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr[-1500:]}", "wall_s": wall}
    (run_dir,) = [p.parent for p in logdir.glob("*/*/metrics.csv")]
    rows = _rows(run_dir / "metrics.csv")
    last = rows[-1]
    checkpoint = run_dir / f"model_{args.iterations}.pt"
    return {
        "wall_s": wall,
        "learner_wall_s": last.get("Perf/wall_s"),
        "time_to_target_s": _time_to_target(rows, args.target),
        "env_steps": last.get("Perf/total_env_steps"),
        "final_success": evaluate(checkpoint, args.task, args.eval_episodes),
        "train_success": last.get("Train/success_rate"),
        "train_return": last.get("Train/mean_return"),
        "staleness_mean": C.median([r.get("Staleness/staleness_mean", 0.0) for r in rows]),
        "staleness_max": max(r.get("Staleness/staleness_max", 0.0) for r in rows),
        "masked_fraction": C.median([r.get("Staleness/masked_fraction", 0.0) for r in rows]),
        "behaviour_weight_mean": C.median(
            [r["Staleness/behaviour_weight_mean"] for r in rows if "Staleness/behaviour_weight_mean" in r]
            or [float("nan")]
        ),  # fmt: skip
        "curve": [
            [
                r.get("Perf/total_env_steps"),
                r.get("Perf/wall_s"),
                r.get("Train/success_rate"),
                r.get("Train/mean_return"),
            ]
            for r in rows
        ],  # fmt: skip
    }


def _specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    specs = []
    for seed in args.seeds:
        for row in args.rows:
            config, _, eta = row.partition("@")
            if config not in CONFIGS or not eta.isdigit():
                raise SystemExit(f"--rows takes CONFIG@ETA with CONFIG in {CONFIGS}, got {row!r}")
            specs.append({"config": config, "eta": int(eta), "seed": seed, "row": row})
    return specs


def main() -> None:
    args = parse_args()
    info = C.machine_info(["rslkit", "mujoco", "numpy", "grpcio"])
    C.print_machine_info(info)
    runs: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for spec in _specs(args):
        with tempfile.TemporaryDirectory(prefix="ppo_async_") as tmp:
            print(f"run {spec['row']} seed {spec['seed']} ...", flush=True)
            result = run(args, spec, Path(tmp))
        runs.append({**spec, **result})
        state = result.get("error") or f"success {result['final_success']:.3f}, wall {result['wall_s']:.0f} s"
        print(f"[{len(runs)}] {spec['row']} seed {spec['seed']}: {state}", flush=True)
        info["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
        info["total_wall_s"] = time.perf_counter() - t_start
        payload = {"benchmark": "ppo_async", "machine": info, "settings": vars(args), "runs": runs}
        C.write_results("ppo_async", payload, args.out)
    rows = [[r["row"], str(r["seed"]), C.fmt(r.get("final_success"), ".3f"), C.fmt(r.get("train_success"), ".3f"),
             C.fmt(r.get("train_return")), C.fmt(r.get("wall_s")), C.fmt(r.get("time_to_target_s")),
             C.fmt(r.get("staleness_mean"), ".2f"), C.fmt(r.get("masked_fraction"), ".3f")] for r in runs]  # fmt: skip
    headers = ["row", "seed", "eval succ", "train succ", "return", "wall s", f"s to {args.target}", "stale", "masked"]
    C.print_table(headers, rows)


if __name__ == "__main__":
    main()
