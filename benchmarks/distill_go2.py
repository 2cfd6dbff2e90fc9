"""Distil a go2-flat PPO teacher into a blind student, both on a wall-clock budget, and score both.

1. Teacher: PPO on ``go2-flat`` (its recipe) reading the privileged ``critic`` group (noiseless state with the base
   linear velocity, foot contacts, base height, friction, added mass): ``--agent.policy.actor_obs_groups critic``.
2. Student: ``--algo distillation`` with the go2-flat recipe (no base linear velocity in ``policy``, the last 5
   frames, MLP 128-128-128), trained on its own rollouts with the teacher's actions as labels.
3. Both scored as ``benchmarks/go2_eval.py`` does: one 20 s episode per env from a fresh reset, deterministic
   policy, training conditions (pushes, noise, randomization): survival and planar velocity tracking error.

Usage: ``python benchmarks/distill_go2.py [--teacher_minutes 12] [--student_minutes 6] [--eval_envs 128]``;
writes ``benchmarks/results/distill_go2.json`` (``--out``), runs under ``logs/distill_go2/``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine_info, write_results  # noqa: E402
from benchmarks.go2_eval import evaluate  # noqa: E402
from rslkit.recipes import build_run, load_run  # noqa: E402
from rslkit.runners.base import BaseRunner  # noqa: E402
from rslkit.utils.checkpoint import latest_checkpoint  # noqa: E402


def train_for(runner: BaseRunner, minutes: float, chunk: int) -> dict[str, Any]:
    """Train in chunks of ``chunk`` iterations until ``minutes`` of wall clock are spent; a checkpoint per chunk."""
    start = time.perf_counter()
    curve = []
    while time.perf_counter() - start < 60.0 * minutes:
        metrics = runner.learn(chunk)
        curve.append({"iteration": runner.iteration, "minutes": (time.perf_counter() - start) / 60.0,
                      **{k: v for k, v in metrics.items() if not k.startswith("Perf/")}})  # fmt: skip
    return {"iterations": runner.iteration, "minutes": (time.perf_counter() - start) / 60.0, "curve": curve}


def score(checkpoint: Path, num_envs: int, seed: int) -> dict[str, float]:
    """go2_eval's figures for ``checkpoint`` (the env as the run was trained: the student's without velocity)."""
    env, runner, _ = load_run(checkpoint, num_envs=num_envs, seed=seed, task="go2-flat")
    return evaluate(runner, env, warmup_steps=round(1.0 / env.dt))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher_minutes", type=float, default=12.0)
    parser.add_argument("--student_minutes", type=float, default=6.0)
    parser.add_argument("--num_envs", type=int, default=512, help="training envs (the recipes' default)")
    parser.add_argument("--eval_envs", type=int, default=128, help="evaluation episodes (one per env)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--teacher", default="", help="reuse this teacher checkpoint instead of training one")
    parser.add_argument("--logdir", default="logs/distill_go2")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    info = machine_info(["torch", "mujoco"])
    root = Path(args.logdir) / time.strftime("%Y-%m-%d_%H-%M-%S")
    result: dict[str, Any] = {"machine": info, "settings": vars(args)}
    if args.teacher:
        teacher = Path(args.teacher)
    else:
        _, ppo = build_run("go2-flat", "ppo", ["--agent.policy.actor_obs_groups=critic", "--agent.logger="],
                           num_envs=args.num_envs, seed=args.seed, log_dir=root / "teacher")  # fmt: skip
        result["teacher_training"] = train_for(ppo, args.teacher_minutes, chunk=5)
        teacher = latest_checkpoint(root / "teacher")
    result["teacher"] = {"checkpoint": str(teacher), **score(teacher, args.eval_envs, 1_000_003)}
    print("teacher", result["teacher"], flush=True)
    _, student = build_run("go2-flat", "distillation", ["--agent.logger="], num_envs=args.num_envs, seed=args.seed,
                           agent_fields={"teacher_checkpoint": str(teacher)}, log_dir=root / "student")  # fmt: skip
    result["student_training"] = train_for(student, args.student_minutes, chunk=3)
    checkpoint = latest_checkpoint(root / "student")
    result["student"] = {"checkpoint": str(checkpoint), **score(checkpoint, args.eval_envs, 1_000_003)}
    print("student", result["student"], flush=True)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["torch_threads"] = torch.get_num_threads()
    path = write_results("distill_go2", result, args.out or None)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
