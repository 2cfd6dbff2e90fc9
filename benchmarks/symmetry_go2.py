"""Time to the walking criterion of docs/go2.md on go2-flat, PPO with and without symmetry (issue 46, benchmark 2).

Criterion (docs/go2.md): >= 95 % of 20 s episodes survived and a planar velocity tracking error <= 0.2 m/s, scored
by ``benchmarks/go2_eval.py``'s :func:`evaluate` (deterministic policy, one full episode per env, domain
randomization, pushes and observation noise on). Each run (a variant and a seed) trains in its own child process
with the recipe's defaults (512 envs, one torch thread for the update, all cores for the physics, as the docs'
recipe) until the criterion is met or ``--budget_min`` minutes of training have passed. Every ``--check_s``
seconds of training, when the training-time tracking error (stochastic policy) is below ``--gate`` m/s, the
policy is scored on ``--eval_envs`` episodes; scoring time is not training time and is reported apart.

Variants: ``plain`` (no symmetry), ``augment`` (mirrored samples, rsl_rl's ``use_data_augmentation``), and
``augment+mirror`` (plus the mirror loss, coefficient ``--mirror_loss_coeff``).

Usage: ``python benchmarks/symmetry_go2.py [--variants plain,augment] [--seeds 0,1] [--budget_min 15]``
(one run after another; the JSON goes to ``benchmarks/results/symmetry_go2.json`` unless ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import fmt, machine_info, print_table, run_child, write_results  # noqa: E402

SYMMETRY = ["--agent.algorithm.symmetry_cfg.data_augmentation_func", "go2"]
VARIANTS: dict[str, list[str]] = {
    "plain": [],
    "augment": [*SYMMETRY, "--agent.algorithm.symmetry_cfg.use_data_augmentation", "true"],
    "augment+mirror": [
        *SYMMETRY,
        "--agent.algorithm.symmetry_cfg.use_data_augmentation",
        "true",
        "--agent.algorithm.symmetry_cfg.use_mirror_loss",
        "true",
    ],
}
SURVIVAL, ERROR = 0.95, 0.2
"""The walking criterion of docs/go2.md."""


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one variant and seed until the criterion or the budget; the times and every score."""
    import torch

    from benchmarks.go2_eval import evaluate
    from rslkit.envs import make_env
    from rslkit.recipes import build_run

    torch.set_num_threads(1)
    flags = list(VARIANTS[spec["variant"]])
    if spec["variant"] == "augment+mirror":
        flags += ["--agent.algorithm.symmetry_cfg.mirror_loss_coeff", str(spec["mirror_loss_coeff"])]
    _, runner = build_run("go2-flat", "ppo", [*flags, "--agent.logger="], num_envs=spec["num_envs"],
                          seed=spec["seed"], max_iterations=100_000)  # fmt: skip
    train_s, eval_s, iterations, scores = 0.0, 0.0, 0, []
    next_check, reached = spec["check_s"], None
    while train_s < 60 * spec["budget_min"] and reached is None:
        t0 = time.perf_counter()
        metrics = runner.learn(1)
        train_s += time.perf_counter() - t0
        iterations += 1
        if train_s < next_check:
            continue
        next_check = train_s + spec["check_s"]
        train_error = metrics.get("Metrics/lin_vel_error", float("nan"))
        score: dict[str, Any] = {"train_min": train_s / 60, "iteration": iterations, "train_error": train_error}
        if train_error <= spec["gate"]:
            t1 = time.perf_counter()
            # A fresh env per score (its own generator; the global RNG of training is left alone).
            eval_env = make_env("go2-flat", num_envs=spec["eval_envs"], seed=1_000_003)
            score.update(evaluate(runner, eval_env, warmup_steps=round(1.0 / eval_env.step_dt)))
            eval_s += time.perf_counter() - t1
            if score["survival"] >= SURVIVAL and score["lin_vel_error"] <= ERROR:
                reached = train_s / 60
        scores.append(score)
        print(json.dumps(score), flush=True)
    return {
        "minutes_to_criterion": reached,
        "train_min": train_s / 60,
        "eval_min": eval_s / 60,
        "iterations": iterations,
        "env_steps": runner.total_env_steps,
        "steps_per_s": runner.total_env_steps / max(train_s, 1e-9),
        "scores": scores,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="plain,augment", help=f"comma-separated, of {list(VARIANTS)}")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--budget_min", type=float, default=15.0, help="training minutes per run")
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument("--eval_envs", type=int, default=128, help="episodes per score")
    parser.add_argument("--check_s", type=float, default=60.0, help="training seconds between checks")
    parser.add_argument("--gate", type=float, default=0.3, help="score only below this training-time error (m/s)")
    parser.add_argument("--mirror_loss_coeff", type=float, default=1.0)
    parser.add_argument("--note", default="", help="how the machine was loaded, written into the JSON")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        spec = json.loads(args.child)
        with open(args.result, "w") as f:
            json.dump({**spec, **_run(spec)}, f)
        return {}
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"--variants: unknown {variant!r}; choose from {list(VARIANTS)}")
    settings = {k: getattr(args, k) for k in ("budget_min", "num_envs", "eval_envs", "check_s", "gate")}
    settings["mirror_loss_coeff"] = args.mirror_loss_coeff
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for variant in args.variants.split(","):
            spec = {"run_id": f"{variant}_seed{seed}", "variant": variant, "seed": seed, **settings}
            print(f"== {spec['run_id']}", flush=True)
            runs.append(run_child(__file__, spec, timeout_s=60 * (2 * args.budget_min + 10)))
    rows = [[r.get("variant", "?"), str(r.get("seed", "?")), fmt(r.get("minutes_to_criterion"), ".1f"),
             fmt(r.get("train_min"), ".1f"), fmt(r.get("steps_per_s"), ".0f"), str(r.get("iterations", "-"))]
            for r in runs]  # fmt: skip
    table = print_table(["variant", "seed", "min to criterion", "trained min", "steps/s", "iterations"], rows)
    payload = {
        "benchmark": "symmetry_go2",
        "question": "Minutes of training until go2-flat walks (docs/go2.md criterion), with and without symmetry",
        "criterion": {"survival_min": SURVIVAL, "lin_vel_error_max": ERROR},
        "settings": settings,
        "note": args.note,
        "machine": machine_info(["torch", "mujoco"]),
        "runs": runs,
        "table": table,
    }
    print(f"wrote {write_results('symmetry_go2', payload, args.out)}")
    return payload


if __name__ == "__main__":
    main()
