"""Score a go2-flat checkpoint against the locomotion goal: 20 s episodes survived and planar velocity tracking error.

Each of ``--num_envs`` envs runs exactly one full episode (20 s at the defaults) from a fresh reset with the
deterministic policy, under the training conditions (domain randomization, pushes and observation noise on; turn
pushes and noise off with ``--clean``). Reported:

- ``survival``: fraction of episodes that reach the time-out without a fall (goal >= 0.95);
- ``lin_vel_error``: mean over alive env-steps of ``|v*_xy - v_xy|`` in m/s (goal <= 0.2 for commands up to 1 m/s;
  the task draws ``vx`` in [-1, 1], ``vy`` in [-0.5, 0.5] m/s), also restricted to commands with ``|v*_xy| <= 1``
  and after the first second of each episode (the start-up transient);
- ``ang_vel_error``: mean ``|w*_z - w_z|`` (rad/s).

Usage: ``python benchmarks/go2_eval.py --checkpoint logs/go2-flat/<run>/model_<it>.pt [--num_envs 256] [--clean]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rslkit.envs.tasks.go2_flat import Go2FlatTask  # noqa: E402
from rslkit.recipes import load_run  # noqa: E402
from rslkit.runners.evaluation import evaluate_episodes  # noqa: E402


def evaluate(runner, env: Go2FlatTask, warmup_steps: int) -> dict[str, float]:
    """One full episode per env with the deterministic policy; see the module docstring for the figures."""
    n = env.num_envs
    fell = torch.zeros(n, dtype=torch.bool)
    err_sum, err_late, ang_sum = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    alive_steps, late_steps = torch.zeros(n), torch.zeros(n)
    env.reset()
    commands = env.commands.clone()
    step = [0]

    def track(dones: torch.Tensor, extras: dict, active: torch.Tensor) -> None:
        err, ang = env._lin_vel_error.cpu(), env._ang_vel_error.cpu()  # of the step just taken, before resets
        err_sum.add_(err * active)
        ang_sum.add_(ang * active)
        alive_steps.add_(active.float())
        late = active & (step[0] >= warmup_steps)
        err_late.add_(err * late)
        late_steps.add_(late.float())
        fell.logical_or_(dones & active & ~extras["time_outs"].cpu().bool())
        step[0] += 1

    evaluate_episodes(env, runner.inference_policy(), runner.reset_inference, runner.device, False, track)
    alive = ~fell
    within = torch.linalg.vector_norm(commands[:, :2].cpu(), dim=-1) <= 1.0
    return {
        "episodes": float(n),
        "survival": alive.float().mean().item(),
        "lin_vel_error": (err_sum.sum() / alive_steps.sum()).item(),
        "lin_vel_error_cmd_le_1": (err_sum[within].sum() / alive_steps[within].sum()).item(),
        "lin_vel_error_after_1s": (err_late.sum() / late_steps.sum()).item(),
        "ang_vel_error": (ang_sum.sum() / alive_steps.sum()).item(),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--num_envs", type=int, default=256, help="episodes (one per env)")
    parser.add_argument("--seed", type=int, default=1_000_003)
    parser.add_argument("--clean", action="store_true", help="no pushes, no observation noise")
    parser.add_argument("--out", default="", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    clean = ["--env.push_interval_s", "0", "--env.noise_level", "0"] if args.clean else []
    env, runner, _ = load_run(args.checkpoint, num_envs=args.num_envs, seed=args.seed, overrides=clean, task="go2-flat")
    assert isinstance(env, Go2FlatTask)
    stats = evaluate(runner, env, warmup_steps=round(1.0 / env.dt))
    stats["clean"] = float(args.clean)
    print(json.dumps(stats, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"checkpoint": args.checkpoint, **stats}, indent=1))
    return stats


if __name__ == "__main__":
    main()
