"""rslkit PPO on ``cartpole`` and ``pendulum`` against the published CleanRL / rl-baselines3-zoo figures, 3 seeds.

Anchors: CleanRL ``ppo.py`` on CartPole-v1, 500k env steps: episodic return 490 +- 6 (its benchmark docs);
rl-baselines3-zoo PPO on Pendulum-v1, 100k env steps (n_envs 4, n_steps 1024, gamma 0.9, 10 epochs, gSDE):
mean evaluation reward -172 (its ``benchmark.md``). rslkit's ``cartpole`` is Gymnasium's CartPole-v1 batched in
torch (same dynamics, termination, reward, 500-step limit, discrete actions); ``pendulum`` is Pendulum-v1 batched.

Run (results in benchmarks/results/ppo_standard.json; ~10 min on 2 cores, runs one per core)::

    .venv/bin/python benchmarks/ppo_standard.py

Rows (``--configs``), each run to the anchor's env-step budget (and ``pendulum`` also to 1M steps):
    ``recipe``: the task's registry recipe (``train.py --task T`` defaults): cartpole 256 envs x 64 steps, 8
        epochs; pendulum 1024 envs x 32 steps, gamma 0.95.
    ``zoo``: pendulum only, rl-zoo's batch shape in rslkit: 4 envs x 1024 steps, gamma 0.9, 10 epochs of 64-sample
        mini-batches, lr 1e-3 fixed, no entropy bonus (no gSDE: rslkit's Gaussian has a state-independent std).
Reported per run: the training return (mean of the last 100 complete episodes, first random-length episodes left
out) and the deterministic policy's mean return over 100 fresh episodes, at the budget; wall-clock of training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

BUDGETS = {"cartpole": [500_000], "pendulum": [100_000, 1_000_000]}
ANCHORS = {
    "cartpole": {"steps": 500_000, "return": 490.0, "source": "CleanRL ppo.py, CartPole-v1, 500k steps: 490 +- 6"},
    "pendulum": {"steps": 100_000, "return": -172.0, "source": "rl-baselines3-zoo benchmark.md, PPO Pendulum-v1"},
}
CONFIGS: dict[str, dict[str, list[str]]] = {
    "recipe": {"cartpole": [], "pendulum": []},
    "zoo": {
        "pendulum": [
            "--env.num_envs", "4", "--agent.num_steps_per_env", "1024", "--agent.algorithm.gamma", "0.9",
            "--agent.algorithm.lam", "0.95", "--agent.algorithm.num_learning_epochs", "10",
            "--agent.algorithm.num_mini_batches", "64", "--agent.algorithm.learning_rate", "1e-3",
            "--agent.algorithm.schedule", "fixed", "--agent.algorithm.entropy_coef", "0",
            "--agent.init_at_random_ep_len", "false",
        ],
    },
}  # fmt: skip


# ============================================================================================== child side
def evaluate(task: str, policy, episodes: int, seed: int = 12345) -> float:
    """Mean return of ``policy`` (deterministic) over ``episodes`` fresh episodes, one per env."""

    from rslkit.envs.registry import get_task
    from rslkit.runners.evaluation import evaluate_episodes

    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = episodes, seed
    return float(evaluate_episodes(spec.make_env(cfg, "cpu"), policy, lambda dones: None).returns.mean())


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from rslkit.recipes.run import build_run

    t0 = time.perf_counter()
    env, runner = build_run(spec["task"], "ppo", CONFIGS[spec["config"]][spec["task"]], seed=spec["seed"])
    rec = C.EpisodeReturnRecorder(env, 100)
    runner.env = rec
    build_s = time.perf_counter() - t0
    points, curve = [], []
    budgets = sorted(spec["budgets"])
    t0, train_s = time.perf_counter(), 0.0
    while budgets:
        t_it = time.perf_counter()
        runner.learn(1)
        train_s += time.perf_counter() - t_it
        steps = runner.total_env_steps
        mean = sum(rec.finished) / len(rec.finished) if rec.finished else None
        curve.append([steps, train_s, mean])
        if steps >= budgets[0]:
            eval_return = evaluate(spec["task"], runner.inference_policy(), spec["eval_episodes"])
            runner.policy.train()
            points.append({"budget": budgets.pop(0), "env_steps": steps, "train_s": train_s, "train_return": mean,
                           "eval_return": eval_return})  # fmt: skip
            print(f"{steps:,} env steps in {train_s:.1f} s: train {C.fmt(mean)}, eval {eval_return:.1f}", flush=True)
    return {"build_s": build_s, "num_envs": env.num_envs, "points": points, "curve": curve,
            "wall_s": time.perf_counter() - t0}  # fmt: skip


# ============================================================================================== parent side
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["cartpole", "pendulum"], choices=list(BUDGETS))
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--lanes", type=int, default=2, help="runs at once, one per CPU core")
    p.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ppo_standard.json)")
    p.add_argument("--logs", default=None, help="keep each child's console output in this folder")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p.parse_args()


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for task, config in dict.fromkeys((r["task"], r["config"]) for r in runs):
        rs = [r for r in runs if (r["task"], r["config"]) == (task, config) and "error" not in r]
        for budget in BUDGETS[task]:
            pts = [p for r in rs for p in r["points"] if p["budget"] == budget]
            if not pts:
                continue
            ev = [p["eval_return"] for p in pts]
            tr = [p["train_return"] for p in pts if p["train_return"] is not None]
            mean = sum(ev) / len(ev)
            std = (sum((x - mean) ** 2 for x in ev) / len(ev)) ** 0.5
            out[f"{task}:{config}@{budget // 1000}k"] = {
                "runs": len(pts), "eval_return": [round(x, 1) for x in ev], "eval_return_mean": mean,
                "eval_return_std": std, "train_return_mean": sum(tr) / len(tr) if tr else None,
                "train_s": C.median([p["train_s"] for p in pts]), "anchor": ANCHORS[task],
            }  # fmt: skip
    return out


def main() -> None:
    args = parse_args()
    if args.child is not None:
        C.lane_child(json.loads(args.child), args.result, run)
        return
    info = C.machine_info(["rslkit", "numpy"])
    C.print_machine_info(info)
    script, logs = str(Path(__file__).resolve()), Path(args.logs) if args.logs else None
    snapshot, fingerprint = C.snapshot_code()
    specs = [{"task": t, "config": c, "seed": s, "budgets": BUDGETS[t], "eval_episodes": args.eval_episodes}
             for s in args.seeds for t in args.tasks for c in args.configs if t in CONFIGS[c]]  # fmt: skip
    for k, s in enumerate(specs):
        s["run_id"] = f"{k:02d}_{s['task']}_{s['config']}_s{s['seed']}"
    runs: list[dict[str, Any]] = []
    t_start = time.perf_counter()

    def done(spec: dict[str, Any], result: dict[str, Any]) -> None:
        runs.append({**spec, **result})
        state = (
            "FAILED"
            if "error" in result
            else ", ".join(
                f"{p['budget'] // 1000}k: eval {p['eval_return']:.1f} ({p['train_s']:.0f} s)" for p in result["points"]
            )
        )
        print(f"[{len(runs)}/{len(specs)}] {spec['task']} {spec['config']} seed {spec['seed']}: {state}", flush=True)
        info["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
        info["total_wall_s"] = time.perf_counter() - t_start
        info["rslkit_fingerprints_seen"] = C.check_fingerprints(runs, fingerprint)
        payload = {"benchmark": "ppo_standard", "machine": info, "anchors": ANCHORS,
                   "settings": {k: v for k, v in vars(args).items() if k not in ("child", "result")},
                   "finished_runs": f"{len(runs)}/{len(specs)}", "summary": _summary(runs), "runs": runs}  # fmt: skip
        C.write_results("ppo_standard", payload, args.out)

    C.run_children_in_lanes(script, specs, min(args.lanes, len(specs)), lambda s: 3600.0, done, logs, snapshot)
    rows = [[k, str(m["runs"]), f"{m['eval_return_mean']:.1f} +- {m['eval_return_std']:.1f}",
             C.fmt(m["train_return_mean"]), C.fmt(m["train_s"]), f"{m['anchor']['return']:.0f}"]
            for k, m in _summary(runs).items()]  # fmt: skip
    C.print_table(["task:config@steps", "runs", "eval return", "train return", "train s", "anchor"], rows)


if __name__ == "__main__":
    main()
