"""The learned reward through the real-world loop's simulated robot: pendulum swing-up (issue 15).

Scripted-expert swing-ups (``rslkit.envs.tasks.pendulum.numpy_expert``, each cut 5 frames after the pole is first
within 0.1 rad of upright) train a state progress critic (the ``policy`` observation: cos, sin, angular velocity). Then
``python -m rslkit.realworld local --task pendulum`` runs twice per seed, unpaced and in lockstep with the learner
(speed-independent figures): on the task's reward, and with ``--actor.reward learned``
(the learner never sees the task's reward). The actor logs the task's return of every episode either way.
Reported: the mean task return of the last 5 episodes and the share of them above -200 at equal env steps.

Run (results in benchmarks/results/learned_reward_loop.json, written after each run):
    .venv/bin/python benchmarks/learned_reward_loop.py --seeds 0 1 --steps 4000
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results" / "learned_reward_loop.json"
GOAL = "swing the pendulum up and balance it"
HOLD = 5
"""Frames kept after the first success: they are the done frames."""
DISTRACTORS = ("let the pendulum hang down", "spin the pendulum fast", "open the drawer")


def record(episodes: int, seed: int, hold: int = HOLD):
    """Expert swing-ups as ProgressData."""
    from rslkit.envs.registry import distance_for, get_task
    from rslkit.envs.tasks.pendulum import numpy_expert as pendulum
    from rslkit.rewards.pairs import ProgressData

    spec = get_task("pendulum")
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = episodes, seed
    env = spec.make_env(cfg, "cpu")
    distance = distance_for("pendulum", cfg)
    obs = env.get_observations()
    frames, first = [[] for _ in range(episodes)], [-1] * episodes
    for _ in range(int(env.max_episode_length)):
        states = obs["policy"].clone()
        for i in range(episodes):
            if first[i] < 0 or len(frames[i]) < first[i] + hold:
                frames[i].append(states[i])
                if first[i] < 0 and distance({"policy": states[i].numpy()}) == 0.0:
                    first[i] = len(frames[i])
        obs, _, _, _ = env.step(torch.as_tensor(pendulum({"policy": obs["policy"].numpy()})))
    kept = [(torch.stack(f), first[i] >= 0) for i, f in enumerate(frames) if len(f) >= 4]
    lengths = torch.tensor([len(f) for f, _ in kept])
    ends = lengths.cumsum(0)
    data = ProgressData(
        TensorDict({"policy": torch.cat([f for f, _ in kept])}, [int(ends[-1])]),
        ends - lengths,
        ends,
        [GOAL] * len(kept),
        torch.tensor([s for _, s in kept]),
    )
    return data, {
        "episodes": len(kept),
        "successful": int(data.success.sum()),
        "mean_length": float(lengths.float().mean()),
    }


def train_critic(args, out: Path) -> tuple[Path, dict]:
    from rslkit.rewards.datasets import split_episodes
    from rslkit.rewards.evaluation import evaluate_critic
    from rslkit.rewards.pairs import PairSamplerCfg
    from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg
    from rslkit.rewards.training import ProgressTrainCfg, train_progress_model

    data, info = record(args.demos, seed=100)
    train, held = split_episodes(data, 0.2, 0)
    torch.manual_seed(0)
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=3))
    cfg = ProgressTrainCfg(
        steps=args.critic_steps,
        eval_every=args.critic_steps,
        sampler=PairSamplerCfg(distractor_goals=DISTRACTORS, done_frames=HOLD),
    )
    t0 = time.time()
    train_progress_model(model, train, cfg, out=out)
    assert held is not None
    metrics = evaluate_critic(model, held, stride=2, other_goals=DISTRACTORS, done_frames=HOLD)
    return out / "model.safetensors", {"data": info, "train_s": time.time() - t0, **metrics}


def run_loop(seed: int, reward: str, critic: Path, args) -> dict:
    run_name = f"{reward}_s{seed}" + (f"_bonus{args.done_bonus:g}" if reward == "learned" and args.done_bonus else "")
    cmd = [
        sys.executable,
        "-m",
        "rslkit.realworld",
        "local",
        "--task",
        "pendulum",
        "--seed",
        str(seed),
        "--logdir",
        str(args.logdir),
        "--run_name",
        run_name,
        "--max_iterations",
        "100000",
        "--agent.logger",
        "",
        "--actor.max_env_steps",
        str(args.steps),
        "--actor.realtime",
        "false",
        "--actor.lockstep",
        "true",
    ]
    if reward == "learned":
        cmd += ["--actor.reward", "learned", "--actor.learned_reward.model", str(critic)]
        cmd += ["--actor.learned_reward.scale", str(args.scale), "--actor.learned_reward.dead_band", "0"]
        cmd += ["--actor.learned_reward.done_bonus", str(args.done_bonus)]
    lo_up = f"{sys.executable} {ROOT / 'tests' / 'ros2' / 'lo_up.py'}"
    quoted = " ".join(f"'{c}'" for c in cmd)
    full = ["unshare", "-n", "sh", "-c", f"{lo_up} && {quoted}"] if shutil.which("unshare") else cmd
    t0 = time.time()
    with (args.logdir / f"{run_name}.log").open("w") as f:
        subprocess.run(full, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=3600)
    run_dir = sorted((args.logdir / "pendulum").glob(f"*_realworld_{run_name}"))[-1]
    with (run_dir / "actor-0" / "episodes.csv").open() as f:
        returns = [float(r["return"]) for r in csv.DictReader(f)]
    last = returns[-args.window :]
    return {
        "reward": reward,
        "seed": seed,
        "episodes": len(returns),
        "wall_s": time.time() - t0,
        "last_mean_return": float(np.mean(last)),
        "last_success": float(np.mean([r > -200 for r in last])),
        "returns": returns,
        "run_dir": str(run_dir),
    }


def main() -> None:
    from reward_critic import cpu_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--demos", type=int, default=60)
    parser.add_argument("--critic_steps", type=int, default=1500)
    parser.add_argument("--scale", type=float, default=100.0, help="--actor.learned_reward.scale")
    parser.add_argument("--done_bonus", type=float, default=0.0, help="--actor.learned_reward.done_bonus")
    parser.add_argument("--rewards", nargs="+", default=["task", "learned"], choices=["task", "learned"])
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--logdir", type=Path, default=Path("/tmp/rslkit_bench_learned_loop"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.logdir.mkdir(parents=True, exist_ok=True)
    critic, metrics = train_critic(args, args.logdir / "critic")
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "command": " ".join(sys.argv),
        "critic": metrics,
        "runs": [],
    }
    print(f"critic: {json.dumps(metrics)}", flush=True)
    for seed in args.seeds:
        for reward in args.rewards:
            row = run_loop(seed, reward, critic, args)
            results["runs"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "returns"}), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
