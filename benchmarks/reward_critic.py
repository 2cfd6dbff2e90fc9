"""Progress-critic quality on held-out demonstrations of so101-reach and so101-lift with rendered images (issue 15).

For each task: the scripted expert (``TaskSpec.expert``) runs in envs with the ``front`` camera on
(64x64, fast quality); each episode is cut 5 frames after its first success (demonstrations end when the task is
done; the last 3 frames are labelled done); episodes that never succeed are kept as failed. A critic that sees only
the image (and, as a second row, image + state) is trained on 80 % of the episodes with distractor goals and graded
on the other 20 %: VOC, reversed VOC, mismatched-goal |delta|, done AUROC (rslkit.rewards.evaluation).

Run (results in benchmarks/results/reward_critic.json, written after each configuration):
    .venv/bin/python benchmarks/reward_critic.py --episodes 60 --steps 3000
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "reward_critic.json"
GOALS = {"so101-reach": "move the gripper to the green ball", "so101-lift": "pick up the cube and lift it"}
HOLD = 5
"""Frames kept after the first success: they are the done frames."""
DISTRACTORS = ("open the drawer", "push the cube to the left", "wave the arm", "put the cube in the bowl")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def record(
    task: str,
    episodes: int,
    num_envs: int,
    seed: int,
    hold: int = HOLD,
    cameras: tuple[str, ...] = ("front",),
    noise: float = 0.0,
):
    """Expert episodes (with ``cameras``) as ProgressData (cut ``hold`` frames after the first success); ``noise``:
    std of Gaussian noise on the expert's actions in every other env (varied demonstrations)."""
    from rslkit.envs.registry import expert_for, get_task
    from rslkit.rewards.pairs import ProgressData

    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed, cfg.cameras, cfg.sim_threads = num_envs, seed, tuple(cameras), 1
    env = spec.make_env(cfg, "cpu")
    expert = expert_for(task, cfg)
    obs = env.get_observations()
    generator = torch.Generator().manual_seed(seed)
    buffers: list[list[TensorDict]] = [[] for _ in range(num_envs)]
    first_success = [-1] * num_envs
    done_eps: list[tuple[TensorDict, bool]] = []
    t0 = time.time()
    while len(done_eps) < episodes:
        frame = obs.select("policy", *[f"camera_{c}" for c in cameras]).clone()
        for i in range(num_envs):
            buffers[i].append(frame[i])
        actions = torch.as_tensor(expert({"policy": obs["policy"].numpy()}))
        if noise > 0:
            jitter = noise * torch.randn(actions.shape, generator=generator)
            actions = (actions + jitter * (torch.arange(num_envs) % 2 == 1).unsqueeze(-1)).clamp(-1, 1)
        obs, _, dones, extras = env.step(actions)
        success = extras.get("success", torch.zeros(num_envs, dtype=torch.bool))
        for i in range(num_envs):
            if first_success[i] < 0 and bool(success[i]):
                first_success[i] = len(buffers[i])
            cut = first_success[i] >= 0 and len(buffers[i]) >= first_success[i] + hold
            if (cut or bool(dones[i])) and len(done_eps) < episodes:
                if len(buffers[i]) >= 4:
                    done_eps.append((torch.stack(buffers[i]), first_success[i] >= 0))
                buffers[i], first_success[i] = [], -1
                if cut and not bool(dones[i]):
                    obs = env.reset_envs(torch.tensor([i]))
    env.close()
    lengths = torch.tensor([len(f) for f, _ in done_eps])
    ends = lengths.cumsum(0)
    data = ProgressData(
        frames=torch.cat([f for f, _ in done_eps]),  # type: ignore[arg-type]
        starts=ends - lengths,
        ends=ends,
        goals=[GOALS[task]] * len(done_eps),
        success=torch.tensor([s for _, s in done_eps]),
    )
    info = {
        "episodes": len(done_eps),
        "successful": int(data.success.sum()),
        "frames": int(ends[-1]),
        "mean_length": float(lengths.float().mean()),
        "record_s": time.time() - t0,
    }
    return data, info


def run_config(data, state: bool, args) -> dict:
    from rslkit.rewards.datasets import split_episodes
    from rslkit.rewards.evaluation import evaluate_critic
    from rslkit.rewards.pairs import PairSamplerCfg
    from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg
    from rslkit.rewards.training import ProgressTrainCfg, train_progress_model

    train, held = split_episodes(data, 0.2, args.seed)
    assert held is not None
    torch.manual_seed(args.seed)
    cfg = ProgressModelCfg(
        cameras=tuple(args.cameras),
        image_size=(64, 64),
        state_group="policy" if state else None,
        state_dim=int(data.frames["policy"].shape[-1]) if state else 0,
    )
    model = ProgressModel(cfg)
    train_cfg = ProgressTrainCfg(
        steps=args.steps,
        batch_size=args.batch_size,
        eval_every=args.steps,
        sampler=PairSamplerCfg(distractor_goals=DISTRACTORS, done_frames=HOLD),
        seed=args.seed,
    )
    t0 = time.time()
    train_progress_model(model, train, train_cfg)
    train_s = time.time() - t0
    metrics = evaluate_critic(model, held, stride=args.stride, other_goals=DISTRACTORS, done_frames=HOLD)
    inputs = "+".join(args.cameras) + ("+state" if state else "")
    return {"inputs": inputs, "train_s": train_s, "held_out": held.num_episodes, **metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(GOALS), choices=list(GOALS))
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--num_envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--state", action="store_true", help="also train the image + state critic")
    parser.add_argument("--cameras", nargs="+", default=["front"], help="cameras the critic looks at (front, wrist)")
    parser.add_argument("--noise", type=float, default=0.0, help="action noise in every other demonstration")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "command": " ".join(sys.argv),
        "tasks": {},
    }
    for task in args.tasks:
        data, info = record(
            task, args.episodes, args.num_envs, args.seed, cameras=tuple(args.cameras), noise=args.noise
        )
        print(f"{task}: recorded {info}", flush=True)
        entry = {"data": info, "critics": []}
        results["tasks"][task] = entry
        for state in (False, True) if args.state else (False,):
            row = run_config(data, state, args)
            entry["critics"].append(row)
            print(
                f"{task} {row['inputs']}: "
                + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1, default=lambda x: float(np.asarray(x))))


if __name__ == "__main__":
    main()
