"""What a progress critic says about states no demonstration visits: uniform random actions (issue 15).

A learning policy starts far from the demonstrations; this measures the critic's done probability and per-step
delta there, and the value VLAC's recursion (with the dead-band) accumulates over an episode of random actions:
the return a random policy gets from ``--reward learned:`` (times ``reward_scale``).

Run:
    .venv/bin/python benchmarks/critic_on_random_states.py --critic CRITIC/model.safetensors --task so101-lift
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def probe(
    critic_path: str, task: str, goal: str | None, envs: int, steps: int, seed: int, dead_band: float, accumulate: str
) -> dict:
    """Done probability, deltas and the accumulated value of ``envs`` random-action episodes of ``steps`` steps."""
    from rslkit.envs.registry import get_task
    from rslkit.rewards.progress_model import default_goal, load_progress_model
    from rslkit.rewards.value import apply_dead_band, value_step

    critic, extra = load_progress_model(critic_path)
    goal = goal or default_goal(critic, extra)
    group = str(critic.cfg.state_group)
    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = envs, seed
    env = spec.make_env(cfg, "cpu")
    obs = env.get_observations()
    generator = torch.Generator().manual_seed(seed)
    value = torch.zeros(envs)
    done, delta = [], []
    for _ in range(steps):
        action = torch.rand(envs, env.num_actions, generator=generator) * 2 - 1
        nxt, _, _, _ = env.step(action)
        with torch.no_grad():
            score = critic.score(TensorDict({group: obs[group]}, [envs]), TensorDict({group: nxt[group]}, [envs]), goal)
        value = value_step(value, apply_dead_band(score.delta.float(), dead_band), accumulate)
        done.append(score.done.float())
        delta.append(score.delta.float())
        obs = nxt
    env.close()
    d, dl = torch.stack(done), torch.stack(delta)
    return {
        "task": task,
        "goal": goal,
        "envs": envs,
        "steps": steps,
        "dead_band": dead_band,
        "accumulate": accumulate,
        "done_mean": float(d.mean()),
        "done_above_0.9": float((d >= 0.9).float().mean()),
        "delta_abs_mean": float(dl.abs().mean()),
        "delta_mean": float(dl.mean()),
        "delta_above_dead_band": float((dl > dead_band).float().mean()),
        "delta_below_minus_dead_band": float((dl < -dead_band).float().mean()),
        "final_value_mean": float(value.mean()),
        "final_value_std": float(value.std()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--critic", required=True, help="model.safetensors of a state critic")
    parser.add_argument("--task", default="so101-lift")
    parser.add_argument("--goal", default=None, help="default: the critic's goal")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100, help="one episode of so101-lift")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--dead_band", type=float, default=0.02)
    parser.add_argument("--accumulate", default="vlac", choices=["vlac", "sum"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        json.dumps(
            probe(args.critic, args.task, args.goal, args.envs, args.steps, args.seed, args.dead_band, args.accumulate)
        )
    )


if __name__ == "__main__":
    main()
