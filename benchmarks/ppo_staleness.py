"""PPO on stale data: naive PPO vs decoupled PPO (AReaL, and A-3PO's log-linear proximal policy) vs M2PO, at a
controlled staleness eta, in one process.

Each iteration's rollout is collected by the learner's policy as it was ``eta`` updates earlier (a snapshot of the
actor and its observation normalizer; the first ``eta`` iterations use the oldest snapshot there is), so every
consumed sample is exactly ``eta`` versions behind: the worst case AReaL's admission rule allows. The critic that
computes values and GAE is the learner's current one, as an asynchronous learner's would be. ``eta = 0`` is plain
synchronous PPO. The asynchronous loop itself (actors in other processes, transport, admission) is not what this
measures: only what staleness does to the update.

Run (results in benchmarks/results/ppo_staleness.json; ~20 min on 2 cores, runs one per core)::

    .venv/bin/python benchmarks/ppo_staleness.py
    .venv/bin/python benchmarks/ppo_staleness.py --quick   # smoke run, ~2 min

Rows (``--configs``): ``sync`` (eta 0), and for each eta in ``--etas`` (2 8): ``naive`` (PPO's ratio to the
behaviour policy), ``decoupled`` (``w min(u A, clip(u) A)``, ``pi_prox`` recomputed, weight cap 5, mask),
``a3po`` (the same with the log-linear ``pi_prox``) and ``m2po`` (naive plus M2PO's mask at 0.04). The task's PPO
recipe otherwise (``so101-reach``: 512 envs, 24 steps, adaptive learning rate). Reported: success of the
deterministic policy on 256 fresh episodes at every ``--eval-every`` iterations and at the end, the training return,
and the staleness statistics of the updates.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

CONFIGS = ("sync", "naive", "decoupled", "a3po", "m2po")
STALENESS = {
    "sync": [],
    "naive": [],
    "decoupled": ["--agent.algorithm.staleness.objective", "decoupled"],
    "a3po": ["--agent.algorithm.staleness.objective", "decoupled", "--agent.algorithm.staleness.proximal", "loglinear"],
    "m2po": ["--agent.algorithm.staleness.m2_threshold", "0.04"],
}


# ============================================================================================== child side
def success_rate(task: str, runner, episodes: int, seed: int = 12345) -> float:
    """Success of ``runner``'s deterministic policy over ``episodes`` fresh episodes of ``task``, one per env."""
    from rslkit.envs.registry import get_task

    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = episodes, seed
    if hasattr(cfg, "sim_threads"):
        cfg.sim_threads = 1
    env = spec.make_env(cfg, "cpu")
    rate = C.success_rate(env, runner)
    getattr(env, "close", lambda: None)()
    return rate


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from rslkit.algorithms.gae import bootstrap_time_outs
    from rslkit.recipes.run import build_run

    over = list(STALENESS[spec["config"]])
    if spec["task"].startswith("so101"):
        over += ["--env.sim_threads", "1"]  # one core per run
    env, runner = build_run(spec["task"], "ppo", over, seed=spec["seed"])
    alg = runner.alg
    eta = spec["eta"]
    behaviour = copy.deepcopy(alg.policy).eval()
    snapshots: deque = deque(maxlen=eta + 1)
    obs = env.get_observations()
    returns = torch.zeros(env.num_envs)
    finished: deque = deque(maxlen=200)
    curve, evals = [], []
    t0 = time.perf_counter()
    for it in range(1, spec["iterations"] + 1):
        snapshots.append((alg.version, copy.deepcopy(alg.policy.state_dict())))
        behaviour_version, state = snapshots[0]
        behaviour.load_state_dict(state)
        with torch.inference_mode():
            for _ in range(runner.cfg.num_steps_per_env):
                raw, log_prob, _, params = behaviour.act(obs)
                value = alg.policy.value(obs)  # the learner's current critic
                next_obs, rewards, dones, extras = env.step(behaviour.to_env(raw))
                returns += rewards
                done_ids = dones.nonzero().flatten()
                finished.extend(returns[done_ids].tolist())
                returns[done_ids] = 0
                r = bootstrap_time_outs(rewards.float(), value, extras.get("time_outs"), alg.cfg.gamma)
                alg.storage.add(obs, raw, log_prob, value, r, dones.bool(), params, behaviour_version)
                obs = next_obs
            alg.compute_returns(obs)
        stats = alg.update()
        mean_return = sum(finished) / len(finished) if finished else None
        curve.append([it, time.perf_counter() - t0, mean_return, stats["staleness_mean"],
                      stats.get("behaviour_weight_mean"), stats.get("masked_fraction"), stats["first_ratio"],
                      alg.learning_rate])  # fmt: skip
        if it % spec["eval_every"] == 0 or it == spec["iterations"]:
            rate = success_rate(spec["task"], runner, spec["eval_episodes"])
            alg.policy.train()
            evals.append([it, it * runner.cfg.num_steps_per_env * env.num_envs, rate])
            print(f"it {it}: success {rate:.3f}, return {C.fmt(mean_return)}, lr {alg.learning_rate:.2e}", flush=True)
    return {"train_s": time.perf_counter() - t0, "final_success": evals[-1][2], "evals": evals, "curve": curve,
            "env_steps": spec["iterations"] * runner.cfg.num_steps_per_env * env.num_envs}  # fmt: skip


# ============================================================================================== parent side
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="so101-reach")
    p.add_argument("--etas", nargs="+", type=int, default=[2, 8])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--eval-episodes", type=int, default=256)
    p.add_argument("--lanes", type=int, default=2, help="runs at once, one per CPU core")
    p.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ppo_staleness.json)")
    p.add_argument("--logs", default=None, help="keep each child's console output in this folder")
    p.add_argument("--quick", action="store_true", help="smoke run: pendulum, 1 seed, eta 4, 6 iterations")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.task, args.etas, args.seeds, args.iterations, args.eval_every = "pendulum", [4], [0], 6, 3
        args.eval_episodes = 64
        if args.out is None:
            args.out = str(C.RESULTS_DIR / "ppo_staleness_quick.json")
    return args


def _specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    common = {"task": args.task, "iterations": args.iterations, "eval_every": args.eval_every,
              "eval_episodes": args.eval_episodes}  # fmt: skip
    specs = []
    for seed in args.seeds:
        if "sync" in args.configs:
            specs.append({**common, "config": "sync", "eta": 0, "seed": seed})
        for eta in args.etas:
            for config in args.configs:
                if config != "sync":
                    specs.append({**common, "config": config, "eta": eta, "seed": seed})
    for k, s in enumerate(specs):
        s["run_id"] = f"{k:02d}_{s['config']}_eta{s['eta']}_s{s['seed']}"
    return specs


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in dict.fromkeys((r["config"], r["eta"]) for r in runs):
        rs = [r for r in runs if (r["config"], r["eta"]) == key and "error" not in r]
        if not rs:
            continue
        out[f"{key[0]}@eta{key[1]}"] = {
            "runs": len(rs),
            "final_success": [round(r["final_success"], 3) for r in rs],
            "final_success_mean": sum(r["final_success"] for r in rs) / len(rs),
            "success_by_iteration": {
                str(e[0]): sum(r["evals"][i][2] for r in rs) / len(rs) for i, e in enumerate(rs[0]["evals"])
            },  # fmt: skip
            "final_return_mean": C.median([r["curve"][-1][2] for r in rs if r["curve"][-1][2] is not None]),
            "train_s": C.median([r["train_s"] for r in rs]),
        }
    return out


def main() -> None:
    args = parse_args()
    if args.child is not None:
        C.lane_child(json.loads(args.child), args.result, run)
        return
    info = C.machine_info(["rslkit", "mujoco", "numpy"])
    C.print_machine_info(info)
    script, logs = str(Path(__file__).resolve()), Path(args.logs) if args.logs else None
    snapshot, fingerprint = C.snapshot_code()
    specs = _specs(args)
    runs: list[dict[str, Any]] = []
    t_start = time.perf_counter()

    def done(spec: dict[str, Any], result: dict[str, Any]) -> None:
        runs.append({**spec, **result})
        state = "FAILED" if "error" in result else f"final success {result['final_success']:.3f}"
        print(f"[{len(runs)}/{len(specs)}] {spec['config']:<9} eta {spec['eta']} seed {spec['seed']} (cpu "
              f"{spec['cpu']}): {state}", flush=True)  # fmt: skip
        info["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
        info["total_wall_s"] = time.perf_counter() - t_start
        info["rslkit_fingerprints_seen"] = C.check_fingerprints(runs, fingerprint)
        payload = {"benchmark": "ppo_staleness", "machine": info,
                   "settings": {k: v for k, v in vars(args).items() if k not in ("child", "result")},
                   "finished_runs": f"{len(runs)}/{len(specs)}", "summary": _summary(runs), "runs": runs}  # fmt: skip
        C.write_results("ppo_staleness", payload, args.out)

    C.run_children_in_lanes(script, specs, min(args.lanes, len(specs)), lambda s: 3600.0, done, logs, snapshot)
    rows = [[k, str(m["runs"]), *[C.fmt(v, ".3f") for v in m["success_by_iteration"].values()],
             C.fmt(m["final_return_mean"]), C.fmt(m["train_s"])] for k, m in _summary(runs).items()]  # fmt: skip
    evals = next((r["evals"] for r in runs if "evals" in r), [])
    C.print_table(["config", "runs", *[f"succ@{e[0]}" for e in evals], "return", "train s"], rows)


if __name__ == "__main__":
    main()
