"""rslkit SAC vs Stable-Baselines3 SAC: time to a return on Pendulum, return at a step budget on MuJoCo.

Run (results in benchmarks/results/sac_vs_sb3.json). On a shared 2-core machine pin torch to one thread
(oversubscribed OpenMP threads make SAC updates 10-50x slower, at random):

    .venv/bin/python benchmarks/sac_vs_sb3.py --threads 1 --parts pendulum            # ~5-10 min
    .venv/bin/python benchmarks/sac_vs_sb3.py --threads 1 --parts mujoco              # ~2 h on 2 cores
    .venv/bin/python benchmarks/sac_vs_sb3.py --quick                                 # smoke test, ~5 min

Part ``pendulum`` - wall-clock and env steps until the mean return of the last ``--window`` (10) finished training
episodes first reaches ``--threshold`` (-200), capped at ``--cap-rslkit`` / ``--cap-sb3`` seconds.
    rslkit: the registry default ``small_task_sac_cfg()`` (64-64 networks, batch 1024, 1 update per vectorized step,
    tau 0.1, 3-step returns, gamma 0.95, lr 3e-3, initial alpha 0.1) on the batched torch ``pendulum`` task with
    ``--rslkit-envs`` (64) envs, driven one iteration (8 vectorized steps) at a time.
    SB3: ``SAC("MlpPolicy")`` on Gymnasium ``Pendulum-v1`` (1 env) with the rl-baselines3-zoo hyperparameters
    (``hyperparams/sac.yml``, ``Pendulum-v1``: learning_rate 1e-3; the rest SB3 defaults: 256-256 networks,
    batch 256, tau 0.005, gamma 0.99, 1 update per env step, learning_starts 100); a callback stops it.
Part ``mujoco`` - the mean return of the last ``--window`` training episodes at 10k, 50k and ``--mujoco-steps``
(100k) env steps on each of ``--mujoco-envs`` (Hopper-v5, HalfCheetah-v5), ``--mujoco-seeds`` (0 1), and the
wall-clock it took (~2 h on 2 cores). Rows (``--mujoco-libs``):
    rslkit: ``train.py --task gym:<EnvId> --algo sac`` defaults (``gym_sac_cfg``: 8 envs in a SyncVectorEnv,
    256-256 networks, batch 512, 4 updates per vectorized step = 0.5 per transition, tau 0.005, 5000 random
    transitions).
    rslkit-utd: the real-world loop's single-env recipe (``rslkit.realworld.defaults``: 1 env, UTD 10, batch 256,
    1-step targets, LayerNorm critics, lr 1e-3, tau 0.01) with 5000 random transitions, run ``--utd-steps`` (15k)
    env steps: 100k gradient updates, about the 90k SB3 makes in 100k env steps.
    SB3: ``SAC("MlpPolicy")`` with the zoo's MuJoCo setting learning_starts 10000, otherwise defaults.
The runs go through a queue on ``--lanes`` (2) lanes, one run per CPU core, pinned to it, one torch thread each: a
run per core keeps the comparison fair (both libraries get one core; neither is slowed by the other's threads).
Results are written after every finished run, so an interrupted benchmark keeps what finished.

Every run is a fresh child process. Part ``pendulum``: for each seed the libraries run back to back and the order
alternates from seed to seed, so drift of the shared machine's load hits both alike. Caveat: rslkit's 64 envs finish
their episodes together, so its window is the newest round of episodes, while SB3's 10 episodes span 2000 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

SB3_ZOO_PENDULUM = {"learning_rate": 1e-3}
SB3_ZOO_MUJOCO = {"learning_starts": 10_000}


# ============================================================================================== child side
def _mean(values: deque) -> float | None:
    return sum(values) / len(values) if values else None


def run_rslkit(spec: dict[str, Any]) -> dict[str, Any]:
    from rslkit.envs.registry import make_env
    from rslkit.realworld.defaults import agent_defaults
    from rslkit.recipes import agent_cfg
    from rslkit.recipes.run import build_run
    from rslkit.runners.off_policy_runner import OffPolicyRunner

    t0 = time.perf_counter()
    if spec["part"] == "pendulum":
        env = make_env("pendulum", num_envs=spec["num_envs"], seed=spec["seed"])
        cfg = agent_cfg("pendulum", "sac")
        cfg.logger, cfg.episode_stats_window = (), spec["window"]
        runner = OffPolicyRunner(env, cfg, None, "cpu")
    else:
        task = f"gym:{spec['env_id']}"
        over = ["--agent.episode_stats_window", str(spec["window"])]
        fields = {}
        if spec["lib"] == "rslkit-utd":  # the real-world loop's recipe, with MuJoCo's usual 5000 random transitions
            fields = {**agent_defaults(task), "learning_starts": 5000}
        env, runner = build_run(task, "sac", over, num_envs=1 if spec["lib"] == "rslkit-utd" else None,
                                seed=spec["seed"], agent_fields=fields)  # fmt: skip
        assert isinstance(runner, OffPolicyRunner)
    build_s = time.perf_counter() - t0
    curve: list[tuple[float, int, float | None]] = []
    reached = None
    t0 = time.perf_counter()
    while True:
        runner.learn(1)
        elapsed, steps = time.perf_counter() - t0, runner.total_env_steps
        mean = _mean(runner.stats.finished_returns)
        curve.append((elapsed, steps, mean))
        full = len(runner.stats.finished_returns) >= spec["window"]
        if spec["part"] == "pendulum" and full and mean is not None and mean >= spec["threshold"]:
            reached = (elapsed, steps, mean)
            break
        if elapsed >= spec["cap_s"] or steps >= spec["max_env_steps"]:
            break
    return {"num_envs": env.num_envs, "build_s": build_s, "loop_s": time.perf_counter() - t0,
            "reached": reached is not None, "time_s": reached[0] if reached else None,
            "env_steps": reached[1] if reached else None, "return_at_stop": curve[-1][2],
            "env_steps_total": runner.total_env_steps, "updates": runner.alg.num_updates, "curve": curve}  # fmt: skip


def run_sb3(spec: dict[str, Any]) -> dict[str, Any]:
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    window = spec["window"]

    class Watch(BaseCallback):
        """Checks the episode window after every env step (SB3 adds a finished episode one step later)."""

        def __init__(self, t0: float) -> None:
            super().__init__()
            self.t0, self.curve, self.reached = t0, [], None
            self.last: float | None = None

        def _on_step(self) -> bool:
            buf = self.model.ep_info_buffer
            elapsed = time.perf_counter() - self.t0
            if buf is not None and len(buf) >= window:
                mean = sum(e["r"] for e in buf) / len(buf)
                if mean != self.last:
                    self.last = mean
                    self.curve.append((elapsed, self.num_timesteps, mean))
                if spec["part"] == "pendulum" and mean >= spec["threshold"]:
                    self.reached = (elapsed, self.num_timesteps, mean)
                    return False
            return elapsed < spec["cap_s"]

    t0 = time.perf_counter()
    env_id = "Pendulum-v1" if spec["part"] == "pendulum" else spec["env_id"]
    env = make_vec_env(env_id, n_envs=1, seed=spec["seed"])
    hyper = SB3_ZOO_PENDULUM if spec["part"] == "pendulum" else dict(SB3_ZOO_MUJOCO)
    if spec["part"] == "mujoco":
        hyper["learning_starts"] = min(hyper["learning_starts"], spec["max_env_steps"] // 10)
    model = SAC("MlpPolicy", env, seed=spec["seed"], device="cpu", verbose=0, stats_window_size=window, **hyper)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cb = Watch(t0)
    model.learn(total_timesteps=spec["max_env_steps"], callback=cb)
    buf = model.ep_info_buffer
    final = sum(e["r"] for e in buf) / len(buf) if buf else None
    r = cb.reached
    return {"num_envs": 1, "build_s": build_s, "loop_s": time.perf_counter() - t0, "reached": r is not None,
            "time_s": r[0] if r else None, "env_steps": r[1] if r else None, "return_at_stop": final,
            "env_steps_total": model.num_timesteps, "updates": model._n_updates, "curve": cb.curve}  # fmt: skip


def child_main(spec: dict[str, Any], result_path: str) -> None:
    import torch

    C.pin_to_cpu(spec.get("cpu"))
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    C.seed_all(spec["seed"])
    result = run_sb3(spec) if spec["lib"] == "sb3" else run_rslkit(spec)
    result["peak_rss_mib"] = C.peak_rss_mib()
    C.write_child_result(result_path, {**spec, **result})


# ============================================================================================== parent side
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--parts", nargs="+", default=["pendulum", "mujoco"], choices=["pendulum", "mujoco"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="pendulum: seeds")
    p.add_argument("--threshold", type=float, default=-200.0, help="pendulum: target mean return")
    p.add_argument("--window", type=int, default=10, help="finished training episodes averaged")
    p.add_argument("--rslkit-envs", type=int, default=64, help="pendulum: rslkit's parallel envs")
    p.add_argument("--cap-rslkit", type=float, default=180.0, help="pendulum: time cap of an rslkit run (s)")
    p.add_argument("--cap-sb3", type=float, default=600.0, help="pendulum: time cap of an SB3 run (s)")
    p.add_argument("--pendulum-max-steps", type=int, default=2_000_000, help="pendulum: env step cap per run")
    p.add_argument("--mujoco-envs", nargs="+", default=["Hopper-v5", "HalfCheetah-v5"])
    p.add_argument("--mujoco-seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--mujoco-libs", nargs="+", default=list(MUJOCO_LIBS), choices=list(MUJOCO_LIBS))
    p.add_argument("--mujoco-steps", type=int, default=100_000, help="mujoco: env steps per run (rslkit, sb3)")
    p.add_argument("--utd-steps", type=int, default=15_000, help="mujoco: env steps per rslkit-utd run")
    p.add_argument("--mujoco-cap", type=float, default=2 * 3600.0, help="mujoco: time cap of a run (s)")
    p.add_argument("--lanes", type=int, default=2, help="mujoco: runs at once, one per CPU core")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads in every run (0: torch default)")
    p.add_argument("--out", default=None, help="JSON output (default benchmarks/results/sac_vs_sb3.json)")
    p.add_argument("--logs", default=None, help="keep each child's console output in this folder")
    p.add_argument("--no-snapshot", action="store_true", help="children import the working tree's rslkit")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, -400 threshold, Hopper 10k steps")
    p.add_argument("--summarize", default=None, metavar="JSON", help="recompute the summary of a results file")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.seeds, args.threshold, args.cap_rslkit, args.cap_sb3 = [0], -400.0, 60.0, 120.0
        args.mujoco_envs, args.mujoco_seeds, args.mujoco_steps, args.utd_steps = ["Hopper-v5"], [0], 10_000, 6_000
        if args.out is None:
            args.out = str(C.RESULTS_DIR / "sac_vs_sb3_quick.json")
    return args


MUJOCO_LIBS = ("rslkit", "rslkit-utd", "sb3")
CHECKPOINTS = (10_000, 50_000, 100_000)
"""Env steps at which the MuJoCo part reports the training return."""


def _specs(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(pendulum specs, run one after another; mujoco specs, queued on the lanes)``."""
    pendulum, mujoco = [], []
    common = {"window": args.window, "threads": args.threads, "threshold": args.threshold}
    if "pendulum" in args.parts:
        for i, seed in enumerate(args.seeds):
            for pos, lib in enumerate(["rslkit", "sb3"] if i % 2 == 0 else ["sb3", "rslkit"]):
                cap = args.cap_rslkit if lib == "rslkit" else args.cap_sb3
                pendulum.append({**common, "part": "pendulum", "env_id": "pendulum", "lib": lib, "seed": seed,
                                 "position": pos, "cap_s": cap, "max_env_steps": args.pendulum_max_steps,
                                 "num_envs": args.rslkit_envs})  # fmt: skip
    if "mujoco" in args.parts:
        # rslkit and SB3 of one (task, seed) start together on the two lanes; the short rslkit-utd runs go last
        main = [lib for lib in ("rslkit", "sb3") if lib in args.mujoco_libs]
        for i, seed in enumerate(args.mujoco_seeds):
            for env_id in args.mujoco_envs:
                for lib in main if i % 2 == 0 else main[::-1]:
                    mujoco.append({**common, "part": "mujoco", "env_id": env_id, "lib": lib, "seed": seed,
                                   "cap_s": args.mujoco_cap, "max_env_steps": args.mujoco_steps})  # fmt: skip
        if "rslkit-utd" in args.mujoco_libs:
            for env_id in args.mujoco_envs:
                for seed in args.mujoco_seeds:
                    mujoco.append({**common, "part": "mujoco", "env_id": env_id, "lib": "rslkit-utd", "seed": seed,
                                   "cap_s": args.mujoco_cap, "max_env_steps": args.utd_steps})  # fmt: skip
    for k, s in enumerate(pendulum + mujoco):
        s["run_id"] = f"{k:02d}_{s['part']}_{s['env_id']}_{s['lib']}_s{s['seed']}"
    return pendulum, mujoco


def return_at(curve: list, steps: int, steps_run: int, final: float | None = None) -> float | None:
    """The windowed training return of the newest curve point at or before ``steps`` env steps (None: none yet,
    or the run stopped before ``steps``). SB3 logs an episode one step after it ends, so a run's last episode may
    have no point: ``steps_run`` (the env steps the run made) decides whether it got there, and a run that stopped
    at ``steps`` reports its ``final`` window (which holds that last episode)."""
    if not curve or steps_run < steps:
        return None
    if steps_run == steps and final is not None:
        return final
    before = [mean for _, s, mean in curve if s <= steps and mean is not None]
    return before[-1] if before else None


def time_at(run: dict[str, Any], steps: int) -> float | None:
    """Seconds of the training loop until ``steps`` env steps (None: not reached); the whole loop when the run
    stopped at ``steps`` (SB3's curve has no point after its last episode)."""
    at = next((t for t, s, _ in run["curve"] if s >= steps), None)
    return run["loop_s"] if at is None and run["env_steps_total"] >= steps else at


def _summarize(runs: list[dict[str, Any]], part: str, env_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lib in ("rslkit", "rslkit-utd", "sb3"):
        rs = [r for r in runs if r["part"] == part and r["env_id"] == env_id and r["lib"] == lib and "error" not in r]
        if not rs:
            continue
        ok = [r for r in rs if r["reached"]]
        m = out[lib] = {
            "runs": len(rs),
            "reached": f"{len(ok)}/{len(rs)}",
            "time_s": C.median([r["time_s"] for r in ok]),
            "env_steps": C.median([r["env_steps"] for r in ok]),
            "return_at_stop": C.median([r["return_at_stop"] for r in rs if r["return_at_stop"] is not None]),
            "loop_s": C.median([r["loop_s"] for r in rs]),
            "env_steps_total": C.median([r["env_steps_total"] for r in rs]),
            "updates": C.median([r["updates"] for r in rs]),
        }
        if part == "mujoco":
            for k in CHECKPOINTS:
                rets = [return_at(r["curve"], k, r["env_steps_total"], r["return_at_stop"]) for r in rs]
                m[f"return_at_{k // 1000}k"] = [None if v is None else round(v, 1) for v in rets]
                m[f"return_at_{k // 1000}k_mean"] = C.median([v for v in rets if v is not None]) if len(rs) else None
                m[f"time_at_{k // 1000}k_s"] = C.median([t for t in (time_at(r, k) for r in rs) if t])
    return out


def _report(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    rows = []
    for part, env_id in dict.fromkeys((r["part"], r["env_id"]) for r in runs):
        s = summary[f"{part}:{env_id}"] = _summarize(runs, part, env_id)
        for lib, m in s.items():
            at = [C.fmt(m.get(f"return_at_{k // 1000}k_mean")) for k in CHECKPOINTS] if part == "mujoco" else ["-"] * 3
            rows.append([part, env_id, lib, m["reached"] if part == "pendulum" else f"{m['runs']} runs",
                         C.fmt(m["time_s"]), C.fmt(m["env_steps"], ",.0f"), *at, C.fmt(m["return_at_stop"]),
                         C.fmt(m["loop_s"]), C.fmt(m["env_steps_total"], ",.0f")])  # fmt: skip
    print("\nSummary (medians over seeds; pendulum: time/env steps to the threshold over the seeds that reached it;"
          " mujoco: training return at 10k/50k/100k env steps)")  # fmt: skip
    C.print_table(["part", "env", "lib", "reached", "time s", "env steps", "R@10k", "R@50k", "R@100k", "return",
                   "loop s", "steps run"], rows)  # fmt: skip
    return summary


def _print_run(k: int, total: int, spec: dict[str, Any], res: dict[str, Any]) -> None:
    name = f"{spec['part']:<8} {spec['env_id']:<15} {spec['lib']:<10} seed {spec['seed']}"
    lane = f" (cpu {spec['cpu']})" if "cpu" in spec else ""
    if "error" in res:
        print(f"[{k}/{total}] {name}{lane}: FAILED", flush=True)
    elif spec["part"] == "pendulum":
        state = (f"reached in {res['time_s']:6.1f} s, {res['env_steps']:>9,} env steps" if res["reached"] else
                 f"NOT reached within {res['loop_s']:.0f} s / {res['env_steps_total']:,} env steps")  # fmt: skip
        print(f"[{k}/{total}] {name}: {state} (return {C.fmt(res['return_at_stop'])})", flush=True)
    else:
        print(f"[{k}/{total}] {name}{lane}: return {C.fmt(res['return_at_stop'])} after {res['env_steps_total']:,}"
              f" env steps in {res['loop_s']:.0f} s", flush=True)  # fmt: skip


def main() -> None:
    args = parse_args()
    if args.child is not None:
        child_main(json.loads(args.child), args.result)
        return
    if args.summarize:  # e.g. after an interrupted run, or with a fixed summary
        path = Path(args.summarize)
        payload = json.loads(path.read_text())
        payload["summary"] = _summarize_all(payload["runs"])
        path.write_text(json.dumps(payload, indent=2, default=str))
        _report(payload["runs"])
        return
    info = C.machine_info(["rslkit", "stable-baselines3", "gymnasium", "mujoco", "numpy"])
    C.print_machine_info(info)
    script, logs = str(Path(__file__).resolve()), Path(args.logs) if args.logs else None
    snapshot, fingerprint = (None, None) if args.no_snapshot else C.snapshot_code()
    pendulum, mujoco = _specs(args)
    total = len(pendulum) + len(mujoco)
    runs: list[dict[str, Any]] = []
    t_start = time.perf_counter()

    def write() -> None:
        info["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
        info["total_wall_s"] = time.perf_counter() - t_start
        info["rslkit_fingerprints_seen"] = C.check_fingerprints(runs, fingerprint)
        payload = {
            "benchmark": "sac_vs_sb3",
            "machine": info,
            "settings": {k: v for k, v in vars(args).items() if k not in ("child", "result")},
            "sb3_hyperparameters": {
                "pendulum": SB3_ZOO_PENDULUM,
                "mujoco": SB3_ZOO_MUJOCO,
                "source": "DLR-RM/rl-baselines3-zoo hyperparams/sac.yml",
            },  # fmt: skip
            "finished_runs": f"{len(runs)}/{total}",
            "summary": _summarize_all(runs),
            "runs": runs,
        }
        C.write_results("sac_vs_sb3", payload, args.out)

    def done(spec: dict[str, Any], result: dict[str, Any]) -> None:
        runs.append({**spec, **result})
        _print_run(len(runs), total, spec, result)
        write()

    for spec in pendulum:
        done(spec, C.run_child(script, spec, spec["cap_s"] + 900.0, logs, snapshot))
    if mujoco:
        lanes = min(args.lanes, len(mujoco))
        print(f"MuJoCo: {len(mujoco)} runs on {lanes} lanes (one per core)", flush=True)
        C.run_children_in_lanes(script, mujoco, lanes, lambda s: s["cap_s"] + 900.0, done, logs, snapshot)
    summary = _report(runs)
    write()
    minutes = (time.perf_counter() - t_start) / 60
    print(f"\nTotal wall time {minutes:.1f} min; load average at end {info['loadavg_now']}")
    print(f"results written to {args.out or C.RESULTS_DIR / 'sac_vs_sb3.json'} ({len(summary)} groups)")


def _summarize_all(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {f"{p}:{e}": _summarize(runs, p, e) for p, e in dict.fromkeys((r["part"], r["env_id"]) for r in runs)}


if __name__ == "__main__":
    main()
