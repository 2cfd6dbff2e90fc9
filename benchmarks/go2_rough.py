"""Env steps/s of ``go2-rough`` against the raw physics of the same model: the task's overhead on top of physics.

One env step = one 50 Hz control step = 4 physics steps of 5 ms of the Go2 on the heightfield terrain. Rows:

- ``task``: ``Go2RoughTask.step`` under random actions (0.5 randn): physics, observations (187 height samples read
  from the terrain grid per env, privileged terms, noise), 11 reward terms, terminations, resets with the level
  curriculum, domain randomization and pushes, all in torch.
- ``physics``: the same task's ``backend.step`` (C MuJoCo ``Batch`` on the heightfield: the same model, the same
  robots on their tiles) under random PD targets around the standing pose: what the task costs with nothing on top.
- ``flat_physics``: the backend of ``go2-flat`` (the plane floor) the same way: the heightfield's own cost.

Each (round, row) runs in a fresh child process (a second ``Batch`` thread pool in one process slows the first;
see benchmarks/go2_throughput.py); the overhead is the median over rounds of ``1 - task / physics``, both measured
seconds apart. Rates are given per wall-clock second and per CPU second of the process (all its threads): on a
shared, loaded machine the CPU-second figure is the steadier measure of the work a row does. ``--ppo_iterations``
adds the teacher's PPO throughput (collection + update, the recipe's networks).

Usage: ``python benchmarks/go2_rough.py [--num_envs 512] [--seconds 3] [--rounds 3] [--ppo_iterations 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine_info, print_table, write_results  # noqa: E402
from rslkit.envs.tasks.go2_flat import HOME, Go2FlatCfg, Go2FlatTask  # noqa: E402
from rslkit.envs.tasks.go2_rough import Go2RoughCfg, Go2RoughTask  # noqa: E402

ROWS = ("task", "physics", "flat_physics")
NOISE = 0.125
"""Standard deviation (rad) of the raw rows' PD targets around the standing pose (the task's 0.25 x 0.5 randn)."""


def _rates(step: Callable[[], None], num_envs: int, seconds: float) -> dict[str, float]:
    """Env steps per wall-clock second and per CPU second (this process, all threads) of ``step``, after one
    warm-up call (one call = one control step of ``num_envs`` envs)."""
    step()
    calls, wall, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        step()
        calls += 1
    return {
        "wall": calls * num_envs / (time.perf_counter() - wall),
        "cpu": calls * num_envs / max(time.process_time() - cpu, 1e-9),
    }


def _task_step(n: int, threads: int) -> Callable[[], None]:
    env = Go2RoughTask(Go2RoughCfg(num_envs=n, sim_threads=threads))
    g = torch.Generator().manual_seed(0)
    return lambda: env.step(0.5 * torch.randn(n, 12, generator=g))


def _physics_step(env: Go2FlatTask) -> Callable[[], None]:
    """Raw ``backend.step`` of a task's backend, its robots where the task's reset put them."""
    home = torch.tensor(HOME, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    n = env.num_envs
    return lambda: env.backend.step(home + NOISE * torch.randn(n, 12, generator=g, dtype=torch.float64))


def _child(row: str, n: int, seconds: float, threads: int) -> dict[str, float]:
    torch.set_num_threads(1)
    if row == "task":
        return _rates(_task_step(n, threads), n, seconds)
    if row == "physics":
        return _rates(_physics_step(Go2RoughTask(Go2RoughCfg(num_envs=n, sim_threads=threads))), n, seconds)
    return _rates(_physics_step(Go2FlatTask(Go2FlatCfg(num_envs=n, sim_threads=threads))), n, seconds)


def _measure(row: str, n: int, seconds: float, threads: int) -> dict[str, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", row, str(n), str(seconds), str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ppo_throughput(n: int, iterations: int, threads: int) -> list[float]:
    """Steps/s (collection + PPO update) of ``iterations`` iterations of the go2-rough teacher recipe."""
    from rslkit.recipes import build_run

    _, runner = build_run("go2-rough", "ppo", ["--env.sim_threads", str(threads), "--agent.logger="], num_envs=n)
    return [runner.learn(1)["Perf/steps_per_s"] for _ in range(iterations)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[512])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sim_threads", type=int, default=2)
    parser.add_argument("--ppo_iterations", type=int, default=2, help="0: skip the PPO measurement")
    parser.add_argument("--note", default="", help="how the machine was loaded while this ran (kept in the JSON)")
    parser.add_argument("--out", default="", help="JSON path (default benchmarks/results/go2_rough.json)")
    parser.add_argument("--child", nargs=4, metavar=("ROW", "N", "SECONDS", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row, n, seconds, threads = args.child
        print(json.dumps(_child(row, int(n), float(seconds), int(threads))))
        return {}
    torch.set_num_threads(1)
    results: dict = {
        "question": "go2-rough env steps/s against raw physics of the same model (goal: overhead <= 15 %)",
        "machine": machine_info(["mujoco", "torch"]),
        "note": args.note,
        "sim_threads": args.sim_threads,
        "terrain": "default Go2RoughCfg: 10 levels x 6 tile types of 8 m at 0.1 m, 187 height samples per env",
        "rows": [],
    }
    table = []
    for n in args.num_envs:
        rounds = []
        for r in range(args.rounds):
            rates = {row: _measure(row, n, args.seconds, args.sim_threads) for row in ROWS}
            rounds.append(rates)
            shown = ", ".join(f"{k} {v['wall']:,.0f} ({v['cpu']:,.0f} per CPU-s)" for k, v in rates.items())
            print(f"n={n} round {r}: {shown}", flush=True)
        for clock in ("wall", "cpu"):
            overhead = statistics.median(1.0 - x["task"][clock] / x["physics"][clock] for x in rounds)
            hfield = statistics.median(1.0 - x["physics"][clock] / x["flat_physics"][clock] for x in rounds)
            medians = {row: statistics.median(x[row][clock] for x in rounds) for row in ROWS}
            summary = {"overhead": overhead, "hfield_cost": hfield, "median": medians}
            results["rows"].append({"num_envs": n, "clock": clock, **summary, "rounds": rounds})
            table.append([str(n), clock, *(f"{medians[row]:,.0f}" for row in ROWS), f"{overhead:.1%}", f"{hfield:.1%}"])
    print_table(["envs", "per", *ROWS, "task overhead", "hfield vs plane"], table)
    if args.ppo_iterations > 0:
        n = args.num_envs[0]
        rates = ppo_throughput(n, args.ppo_iterations, args.sim_threads)
        results["ppo"] = {"num_envs": n, "steps_per_s": rates, "median": statistics.median(rates)}
        print(f"PPO go2-rough teacher, {n} envs: {statistics.median(rates):,.0f} env steps/s (collect + update)")
    path = write_results("go2_rough", results, args.out or None)
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    main()
