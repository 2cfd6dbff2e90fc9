"""rslkit PPO (batched torch Pendulum) vs Stable-Baselines3 PPO (Gymnasium Pendulum-v1): wall-clock time to a return.

Run (full benchmark, 3 seeds, up to ~35 min with the default caps; results in benchmarks/results/ppo_vs_sb3.json).
On a shared 2-core machine pin torch to one thread (oversubscribed OpenMP threads make runs 10x slower, at random):

    .venv/bin/python benchmarks/ppo_vs_sb3.py --threads 1

Smoke test (about a minute, loose threshold and short caps):

    .venv/bin/python benchmarks/ppo_vs_sb3.py --quick

What runs
    rslkit: the registry defaults for ``pendulum`` - ``get_task("pendulum").env_cfg()`` (1024 envs, 200-step
    episodes) and ``rslkit.recipes.agent_cfg("pendulum", "ppo")`` (at the time of writing: 64-64 ELU actor/critic,
    32 steps/env, gamma 0.95, lambda 0.95, no entropy bonus, lr 1e-3 adaptive, 5 epochs x 4 mini-batches,
    observation normalization, randomized initial episode lengths). The runner is driven one iteration at a time
    (``runner.learn(1)`` in a loop) and the return is checked after every iteration.
    SB3: ``PPO("MlpPolicy")`` on Gymnasium ``Pendulum-v1`` with the tuned rl-baselines3-zoo hyperparameters
    (``hyperparams/ppo.yml``, entry ``Pendulum-v1``): n_envs 4 (``make_vec_env``, DummyVecEnv + Monitor), n_steps
    1024, gae_lambda 0.95, gamma 0.9, n_epochs 10, ent_coef 0.0, learning_rate 1e-3, clip_range 0.2, use_sde True,
    sde_sample_freq 4; everything else SB3's default (batch_size 64, 64-64 tanh networks, no normalization).
    A callback checks ``model.ep_info_buffer`` after every vectorized env step and stops training.
    Both on CPU with the same torch intra-op thread count (torch's default, or ``--threads N``).

What is measured
    Wall-clock time (from the start of the training loop; model construction excluded and reported apart), CPU time
    of the process, and env steps until the mean return of the last ``--window`` (100) finished episodes first
    reaches ``--threshold`` (-250), with at least ``--window`` episodes finished. All SB3 episodes are complete
    200-step episodes. For rslkit the episodes are recorded by ``_common.EpisodeReturnRecorder`` around the env,
    which keeps only complete episodes: with ``init_at_random_ep_len`` each env's first episode is cut short at
    random, and those partial returns (which ``runner.stats`` does count) reach -250 after one iteration without
    any learning. ``runner.stats.summary()`` is recorded alongside for reference.
    Each run is capped (``--cap-rslkit``, ``--cap-sb3`` seconds); a run that does not get there is reported as "not
    reached". Every run is a fresh child process; for each seed the two libraries run back to back and the order
    alternates from seed to seed. Summary: medians over seeds and the wall-clock (and CPU-time) ratio SB3 / rslkit
    (ratio of medians and median of per-seed ratios).

Caveat
    The two windows are not the same kind of average: rslkit's 1024 envs finish about 5 episodes per step, so its
    100-episode window is a snapshot of the current policy, while SB3's 4 envs need 20k steps (5 rollouts) to fill
    the window, so its average lags the policy. SB3's buffer is updated just after the callback runs, so SB3 stops
    at most one vectorized step (4 env steps) late. rslkit is checked once per iteration (32768 env steps).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

SB3_ZOO_PENDULUM = {
    "n_steps": 1024,
    "gae_lambda": 0.95,
    "gamma": 0.9,
    "n_epochs": 10,
    "ent_coef": 0.0,
    "learning_rate": 1e-3,
    "clip_range": 0.2,
    "use_sde": True,
    "sde_sample_freq": 4,
}
SB3_ZOO_N_ENVS = 4


# ============================================================================================== child side
def run_rslkit(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from rslkit.envs import get_task
    from rslkit.recipes import agent_cfg as recipe
    from rslkit.runners.on_policy_runner import OnPolicyRunner

    task = get_task("pendulum")
    env_cfg = task.env_cfg()
    env_cfg.seed = spec["seed"]
    agent_cfg = recipe("pendulum", "ppo")
    agent_cfg.episode_stats_window = spec["window"]

    threshold, window, cap = spec["threshold"], spec["window"], spec["cap_s"]
    t0 = time.perf_counter()
    env = C.EpisodeReturnRecorder(task.make_env(env_cfg, "cpu"), window)
    runner = OnPolicyRunner(env, agent_cfg, log_dir=None, device="cpu")
    build_s = time.perf_counter() - t0

    # curve rows: (seconds, env steps, mean return of complete episodes, runner.stats mean return)
    curve: list[tuple[float, int, float | None, float | None]] = []
    reached = None
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    while True:
        runner.learn(1)
        elapsed = time.perf_counter() - t0
        mean = env.mean_return()
        curve.append((elapsed, runner.total_env_steps, mean, runner.stats.summary().get("Train/mean_return")))
        if mean is not None and len(env.finished) >= window and mean >= threshold:
            reached = (elapsed, runner.total_env_steps, mean, time.process_time() - cpu0)
            break
        if elapsed >= cap:
            break
    return {
        "num_envs": env.num_envs,
        "steps_per_iteration": agent_cfg.num_steps_per_env * env.num_envs,
        "torch_threads": torch.get_num_threads(),
        "build_s": build_s,
        "loop_s": time.perf_counter() - t0,
        "reached": reached is not None,
        "time_s": reached[0] if reached else None,
        "env_steps": reached[1] if reached else None,
        "cpu_s": reached[3] if reached else None,
        "return_at_stop": curve[-1][2] if curve else None,
        "runner_stats_return_at_stop": curve[-1][3] if curve else None,
        "partial_episodes_skipped": env.num_partial,
        "init_at_random_ep_len": agent_cfg.init_at_random_ep_len,
        "env_steps_total": runner.total_env_steps,
        "curve": curve,
    }


def run_sb3(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    threshold, window, cap = spec["threshold"], spec["window"], spec["cap_s"]

    class StopAtReturn(BaseCallback):
        def __init__(self, t0: float, cpu0: float) -> None:
            super().__init__()
            self.t0, self.cpu0 = t0, cpu0
            self.reached: tuple[float, int, float, float] | None = None
            self.curve: list[tuple[float, int, float | None]] = []

        def _mean(self) -> float | None:
            buf = self.model.ep_info_buffer
            return sum(e["r"] for e in buf) / len(buf) if buf else None

        def _on_step(self) -> bool:
            elapsed = time.perf_counter() - self.t0
            buf = self.model.ep_info_buffer
            if buf is not None and len(buf) >= window:
                mean = self._mean()
                if mean is not None and mean >= threshold:
                    self.reached = (elapsed, self.num_timesteps, mean, time.process_time() - self.cpu0)
                    self.curve.append((elapsed, self.num_timesteps, mean))
                    return False
            if elapsed >= cap:
                self.curve.append((elapsed, self.num_timesteps, self._mean()))
                return False
            return True

        def _on_rollout_end(self) -> None:
            self.curve.append((time.perf_counter() - self.t0, self.num_timesteps, self._mean()))

    t0 = time.perf_counter()
    env = make_vec_env("Pendulum-v1", n_envs=SB3_ZOO_N_ENVS, seed=spec["seed"])
    model = PPO("MlpPolicy", env, seed=spec["seed"], device="cpu", verbose=0, stats_window_size=window,
                **SB3_ZOO_PENDULUM)  # fmt: skip
    build_s = time.perf_counter() - t0

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    cb = StopAtReturn(t0, cpu0)
    model.learn(total_timesteps=spec["max_env_steps"], callback=cb)
    loop_s = time.perf_counter() - t0
    r = cb.reached
    return {
        "num_envs": SB3_ZOO_N_ENVS,
        "steps_per_iteration": SB3_ZOO_PENDULUM["n_steps"] * SB3_ZOO_N_ENVS,
        "torch_threads": torch.get_num_threads(),
        "build_s": build_s,
        "loop_s": loop_s,
        "reached": r is not None,
        "time_s": r[0] if r else None,
        "env_steps": r[1] if r else None,
        "cpu_s": r[3] if r else None,
        "return_at_stop": cb.curve[-1][2] if cb.curve else None,
        "env_steps_total": model.num_timesteps,
        "curve": cb.curve,
    }


def child_main(spec: dict[str, Any], result_path: str) -> None:
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    C.seed_all(spec["seed"])
    result = run_rslkit(spec) if spec["lib"] == "rslkit" else run_sb3(spec)
    result["peak_rss_mib"] = C.peak_rss_mib()
    if spec["lib"] == "rslkit":
        result.update(C.imported_rslkit())
    C.write_child_result(result_path, {**spec, **result})


# ============================================================================================== parent side
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--threshold", type=float, default=-250.0, help="target mean return")
    p.add_argument("--window", type=int, default=100, help="finished episodes averaged")
    p.add_argument("--cap-rslkit", type=float, default=300.0, help="time cap of an rslkit run (s)")
    p.add_argument("--cap-sb3", type=float, default=600.0, help="time cap of an SB3 run (s)")
    p.add_argument("--sb3-max-steps", type=int, default=10_000_000, help="SB3 total_timesteps (a step cap)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads in every run (0: torch default)")
    p.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ppo_vs_sb3.json)")
    p.add_argument("--logs", default=None, help="keep each child's console output in this folder")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, threshold -1000, window 20, 45 s caps")
    p.add_argument("--no-snapshot", action="store_true", help="import rslkit from the live tree, not a snapshot")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.seeds, args.threshold, args.window, args.cap_rslkit, args.cap_sb3 = [0], -1000.0, 20, 45.0, 45.0
        if args.out is None:
            args.out = str(C.RESULTS_DIR / "ppo_vs_sb3_quick.json")
    return args


def main() -> None:
    args = parse_args()
    if args.child is not None:
        child_main(json.loads(args.child), args.result)
        return

    info = C.machine_info(["rslkit", "stable-baselines3", "gymnasium", "numpy"])
    snapshot, fingerprint = (None, None) if args.no_snapshot else C.snapshot_code()
    if snapshot is not None:
        info["code_snapshot"], info["rslkit_fingerprint"] = str(snapshot), fingerprint
    info["run_threads"] = args.threads or f"torch default ({info['torch_num_threads']})"
    C.print_machine_info(info)
    print(
        f"target: mean return of the last {args.window} finished episodes >= {args.threshold}; caps rslkit "
        f"{args.cap_rslkit:.0f} s, SB3 {args.cap_sb3:.0f} s; seeds {args.seeds}; order alternates per seed\n",
        flush=True,
    )
    script = str(Path(__file__).resolve())
    logs = Path(args.logs) if args.logs else None
    runs: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    k = 0
    for i, seed in enumerate(args.seeds):
        order = ["rslkit", "sb3"] if i % 2 == 0 else ["sb3", "rslkit"]
        for pos, lib in enumerate(order):
            cap = args.cap_rslkit if lib == "rslkit" else args.cap_sb3
            spec = {
                "lib": lib,
                "seed": seed,
                "position": pos,
                "threshold": args.threshold,
                "window": args.window,
                "cap_s": cap,
                "max_env_steps": args.sb3_max_steps,
                "threads": args.threads,
                "run_id": f"{k:02d}_{lib}_s{seed}",
            }
            k += 1
            print(f"[{k}/{2 * len(args.seeds)}] {lib:<6} seed {seed} ... ", end="", flush=True)
            res = {**spec, **C.run_child(script, spec, cap + 600.0, logs, snapshot)}
            runs.append(res)
            if "error" in res:
                print("FAILED", flush=True)
            elif res["reached"]:
                print(f"reached in {res['time_s']:6.1f} s, {res['env_steps']:>9,} env steps "
                      f"(return {res['return_at_stop']:.1f})", flush=True)  # fmt: skip
            else:
                print(f"NOT reached within {res['loop_s']:.0f} s / {res['env_steps_total']:,} env steps "
                      f"(return {C.fmt(res['return_at_stop'])})", flush=True)  # fmt: skip
    total_s = time.perf_counter() - t_start

    print("\nPer run")
    rows = []
    for r in runs:
        if "error" in r:
            rows.append([r["seed"], r["lib"], r["position"], "FAILED", "", "", "", "", "", ""])
            continue
        rows.append([
            r["seed"], r["lib"], r["position"], "yes" if r["reached"] else "NOT reached",
            C.fmt(r["time_s"]), C.fmt(r.get("cpu_s")),
            C.fmt(r["env_steps"], ",d") if r["env_steps"] is not None else "-",
            C.fmt(r["return_at_stop"]), C.fmt(r["build_s"], ".2f"), C.fmt(r["peak_rss_mib"], ".0f"),
        ])  # fmt: skip
    C.print_table(
        ["seed", "lib", "pos", "reached", "time s", "CPU s", "env steps", "return", "build s", "peak MiB"], rows
    )

    by = {lib: [r for r in runs if r["lib"] == lib and "error" not in r] for lib in ("rslkit", "sb3")}
    med: dict[str, dict[str, Any]] = {}
    for lib, rs in by.items():
        ok = [r for r in rs if r["reached"]]
        med[lib] = {
            "reached": f"{len(ok)}/{len(rs)}",
            "time_s": C.median([r["time_s"] for r in ok]),
            "cpu_s": C.median([r["cpu_s"] for r in ok]),
            "env_steps": C.median([r["env_steps"] for r in ok]),
            "env_steps_per_s": C.median([r["env_steps"] / r["time_s"] for r in ok]),
        }
    paired: list[dict[str, Any]] = []
    for seed in args.seeds:
        a = [r for r in by["rslkit"] if r["seed"] == seed]
        b = [r for r in by["sb3"] if r["seed"] == seed]
        if not (a and b):
            continue
        a0, b0 = a[0], b[0]
        if a0["reached"] and b0["reached"]:
            paired.append({"seed": seed, "ratio": b0["time_s"] / a0["time_s"], "bound": "exact",
                           "cpu_ratio": b0["cpu_s"] / a0["cpu_s"]})  # fmt: skip
        elif a0["reached"]:
            paired.append({"seed": seed, "ratio": b0["loop_s"] / a0["time_s"], "bound": "lower (SB3 not reached)"})
        elif b0["reached"]:
            paired.append({"seed": seed, "ratio": b0["time_s"] / a0["loop_s"], "bound": "upper (rslkit not reached)"})
    exact = [p["ratio"] for p in paired if p["bound"] == "exact"]
    exact_cpu = [p["cpu_ratio"] for p in paired if p["bound"] == "exact"]
    summary = {
        "median": med,
        "wall_clock_ratio_sb3_over_rslkit_of_medians": med["sb3"]["time_s"] / med["rslkit"]["time_s"],
        "wall_clock_ratio_paired": paired,
        "wall_clock_ratio_median_paired_exact": C.median(exact),
        "cpu_time_ratio_sb3_over_rslkit_of_medians": med["sb3"]["cpu_s"] / med["rslkit"]["cpu_s"],
        "cpu_time_ratio_median_paired_exact": C.median(exact_cpu),
        "env_steps_ratio_sb3_over_rslkit_of_medians": med["sb3"]["env_steps"] / med["rslkit"]["env_steps"],
    }
    print("\nSummary (medians over seeds that reached the target)")
    C.print_table(
        ["lib", "reached", "time s", "CPU s", "env steps", "env steps/s"],
        [[lib, m["reached"], C.fmt(m["time_s"]), C.fmt(m["cpu_s"]), C.fmt(m["env_steps"], ",.0f"),
          C.fmt(m["env_steps_per_s"], ",.0f")] for lib, m in med.items()],
    )  # fmt: skip
    print(
        f"wall-clock SB3 / rslkit: {summary['wall_clock_ratio_sb3_over_rslkit_of_medians']:.2f} (ratio of medians), "
        f"{summary['wall_clock_ratio_median_paired_exact']:.2f} (median of per-seed ratios); per seed: "
        + ", ".join(f"s{p['seed']} {p['ratio']:.2f} ({p['bound']})" for p in paired)
    )
    print(
        f"CPU time SB3 / rslkit: {summary['cpu_time_ratio_sb3_over_rslkit_of_medians']:.2f} (ratio of medians), "
        f"{summary['cpu_time_ratio_median_paired_exact']:.2f} (median of per-seed ratios)"
    )
    print(f"env steps SB3 / rslkit: {summary['env_steps_ratio_sb3_over_rslkit_of_medians']:.3f} (ratio of medians)")

    info["rslkit_fingerprints_seen"] = C.check_fingerprints(runs, fingerprint)
    if snapshot is not None:
        shutil.rmtree(snapshot, ignore_errors=True)
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    info["total_wall_s"] = total_s
    print(f"\nTotal wall time {total_s / 60:.1f} min; load average at end {info['loadavg_at_end']}")
    payload = {
        "benchmark": "ppo_vs_sb3",
        "machine": info,
        "settings": {
            "threshold": args.threshold,
            "window": args.window,
            "cap_rslkit_s": args.cap_rslkit,
            "cap_sb3_s": args.cap_sb3,
            "seeds": args.seeds,
            "threads": args.threads or "torch default",
            "sb3_hyperparameters": {"n_envs": SB3_ZOO_N_ENVS, **SB3_ZOO_PENDULUM},
            "sb3_hyperparameters_source": "DLR-RM/rl-baselines3-zoo hyperparams/ppo.yml, entry Pendulum-v1",
        },
        "summary": summary,
        "runs": runs,
    }
    path = C.write_results("ppo_vs_sb3", payload, args.out)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
