"""RL with the learned reward only, against the true reward, at equal env steps (issue 15).

For each task: record scripted-expert demonstrations (``TaskSpec.expert``; cut 5 frames after the first
success), train a progress critic on them (``--inputs state``: the ``policy`` observation; ``image``: the ``front``
camera at 64x64), then train the task's PPO recipe twice from the same seed: on the task's reward and on
``--reward learned:critic`` (``LearnedRewardEnv``: the agent never sees the task's reward). Both policies are then
graded on the plain task (deterministic actions, 256 episodes, success as the task defines it at the episode's end).

Demonstrations: half of them with Gaussian noise (std ``--demo_noise``) on the expert's actions, so that joint
velocities and the observed last action stop telling time. The critic is called every ``--stride`` steps.
Everything after ``--`` is passed to every training run (both rewards): with ``--rewards task`` and the shaping terms
zeroed (``-- --env.distance_weight 0 --env.proximity_weight 0 --env.action_rate_weight 0``) the task's own sparse
success term is the reward, i.e. a perfect done classifier.

Run (results in benchmarks/results/learned_reward_rl.json, written after each run):
    .venv/bin/python benchmarks/learned_reward_rl.py --tasks so101-reach --seeds 0 1 --demos 150
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common as C  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "learned_reward_rl.json"


def train_critic(task: str, inputs: str, args, out: Path) -> tuple[Path, dict]:
    from reward_critic import DISTRACTORS, HOLD, record

    from rslkit.envs.columns import select_state_columns
    from rslkit.rewards.datasets import split_episodes
    from rslkit.rewards.evaluation import evaluate_critic
    from rslkit.rewards.pairs import PairSamplerCfg
    from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg
    from rslkit.rewards.training import ProgressTrainCfg, train_progress_model

    cameras = ("front",) if inputs == "image" else ()
    data, info = record(task, args.demos, 8, seed=100, cameras=cameras, noise=args.demo_noise)
    train, held = split_episodes(data, 0.2, 0)
    torch.manual_seed(0)
    state = inputs == "state"
    dim = int(data.frames["policy"].shape[-1])
    columns = select_state_columns(args.state_columns, dim, observation_names(task)) if args.state_columns else ()
    cfg = ProgressModelCfg(
        cameras=() if state else ("front",),
        image_size=(64, 64),
        state_group="policy" if state else None,
        state_dim=dim if state else 0,
        state_columns=columns if state else (),
    )
    model = ProgressModel(cfg)
    train_cfg = ProgressTrainCfg(
        steps=args.critic_steps,
        batch_size=128,
        eval_every=args.critic_steps,
        sampler=PairSamplerCfg(distractor_goals=DISTRACTORS, done_frames=HOLD),
    )
    t0 = time.time()
    train_progress_model(model, train, train_cfg, out=out)
    metrics = evaluate_critic(model, held, stride=2, other_goals=DISTRACTORS, done_frames=HOLD)
    return out / "model.safetensors", {
        "data": info,
        "train_s": time.time() - t0,
        "state_columns": list(columns),
        **metrics,
    }


def observation_names(task: str) -> list[str]:
    """The ``policy`` group's column names of ``task`` (from a one-env instance)."""
    from rslkit.envs.registry import get_task

    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs = 1
    env = spec.make_env(cfg, "cpu")
    names = list(env.observation_names["policy"])
    env.close()
    return names


def evaluate_policy(ckpt: Path, episodes: int = 256) -> float:
    """Success rate of the deterministic policy of ``ckpt`` on the plain task (one episode per env)."""
    from rslkit.recipes import load_run

    env, runner, _ = load_run(ckpt, num_envs=episodes, seed=12345)
    return C.success_rate(env, runner)


def evaluate_policy_of(runner, episodes: int = 256) -> float:
    """Success rate of ``runner``'s current deterministic policy on a fresh plain task."""
    from rslkit.envs.registry import get_task

    spec = get_task(runner.run_info["task"])
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = episodes, 12345
    return C.success_rate(spec.make_env(cfg, "cpu"), runner)


def expert_pairs(task: str, envs: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(obs [T*N, D], actions [T*N, A])`` of the scripted expert on ``envs`` envs for ``steps`` steps."""
    from rslkit.envs.registry import expert_for, get_task

    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = envs, seed
    env = spec.make_env(cfg, "cpu")
    expert = expert_for(task, cfg)
    obs, xs, ys = env.get_observations(), [], []
    for _ in range(steps):
        action = torch.as_tensor(expert({"policy": obs["policy"].numpy()}))
        xs.append(obs["policy"].clone())
        ys.append(action)
        obs, _, _, _ = env.step(action)
    env.close()
    return torch.cat(xs), torch.cat(ys)


def clone_expert(runner, pairs: tuple[torch.Tensor, torch.Tensor], updates: int, seed: int) -> float:
    """Behaviour cloning of the PPO actor's mean on expert ``pairs`` (the same start for both rewards); its loss."""
    from tensordict import TensorDict

    policy = runner.alg.policy
    obs, actions = pairs
    policy.update_normalization(TensorDict({"policy": obs}, [obs.shape[0]]))
    optimizer = torch.optim.Adam(policy.actor.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    loss = torch.zeros(())
    for _ in range(updates):
        idx = torch.randint(obs.shape[0], (512,), generator=generator)
        actor_x, _ = policy.normalized_inputs(TensorDict({"policy": obs[idx]}, [512]))
        mean = policy.dist.mode(policy.dist.params(policy.actor(actor_x)))
        loss = torch.nn.functional.mse_loss(mean, actions[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def run_ppo(task: str, seed: int, reward: str, goal: str | None, args, logdir: Path, cameras: bool) -> dict:
    from rslkit.recipes import build_run
    from rslkit.recipes.learned_reward import RewardCfg, RewardChoice
    from rslkit.rewards.done_refit import DoneRefitCfg

    overrides = (["--env.cameras", "front"] if cameras else []) + args.overrides
    if args.bc_init:
        overrides += ["--agent.policy.init_std", str(args.init_std)]
    settings = RewardCfg(
        goal=goal,
        dead_band=args.dead_band,
        stride=args.stride,
        done_threshold=0.9,
        done_bonus=args.done_bonus,
        end_on_done=not args.no_end_on_done,
        progress_weight=args.progress_weight,
        accumulate=args.accumulate,
        done_term=args.done_term,
        refit=DoneRefitCfg(
            args.refit_every, args.refit_updates, visit_prior=args.visit_prior, encoder=args.refit_encoder
        ),
    )
    choice = RewardChoice(reward, settings if reward.startswith("learned:") else RewardCfg())
    t0 = time.time()
    run_dir = logdir / f"{reward[:7]}_{seed}"
    env, runner = build_run(
        task,
        "ppo",
        overrides,
        seed=seed,
        num_envs=args.num_envs,
        log_dir=run_dir,
        max_iterations=args.iterations,
        reward=choice,
    )
    bc = {}
    if args.bc_init:
        bc["bc_loss"] = clone_expert(runner, expert_pairs(task, 64, 60, seed=200), args.bc_updates, seed)
        bc["bc_success"] = evaluate_policy_of(runner)
    runner.learn()
    wall = time.time() - t0
    ckpt = sorted(runner.log_dir.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))[-1]
    steps = args.iterations * runner.cfg.num_steps_per_env * env.num_envs
    return {
        "reward": reward.split(":")[0],
        "seed": seed,
        "env_steps": steps,
        "wall_s": wall,
        "eval_success": evaluate_policy(ckpt),
        "settings": {
            "stride": args.stride,
            "done_bonus": args.done_bonus,
            "end_on_done": not args.no_end_on_done,
            "progress_weight": args.progress_weight,
            "accumulate": args.accumulate,
            "done_term": args.done_term,
            "refit_every": args.refit_every,
            "refit_updates": args.refit_updates,
            "visit_prior": args.visit_prior,
            "refit_encoder": args.refit_encoder,
            "overrides": " ".join(args.overrides),
        },
        **bc,
        "checkpoint": str(ckpt),
    }


def main() -> None:
    from reward_critic import GOALS, cpu_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=C.TRAIN_FLAGS_HELP)
    parser.add_argument("--tasks", nargs="+", default=["so101-reach"], choices=list(GOALS))
    parser.add_argument("--inputs", default="state", choices=["state", "image"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--demos", type=int, default=60)
    parser.add_argument("--critic_steps", type=int, default=1500)
    parser.add_argument("--iterations", type=int, default=80)
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument("--dead_band", type=float, default=0.02)
    parser.add_argument("--stride", type=int, default=5, help="control steps between critic calls")
    parser.add_argument("--done_bonus", type=float, default=0.0, help="weight of the done probability in the reward")
    parser.add_argument(
        "--progress_weight", type=float, default=1.0, help="weight of the value increments (0: done probability only)"
    )
    parser.add_argument("--accumulate", default="vlac", choices=["vlac", "sum"], help="deltas -> value")
    parser.add_argument(
        "--refit_every", type=int, default=0, help="control steps between done-head refits on the run's visits (0: off)"
    )
    parser.add_argument("--done_term", default="prob", choices=["prob", "log_odds"], help="what the bonus pays")
    parser.add_argument("--visit_prior", type=float, default=0.0, help="refits: 0 visits negative, > 0 nnPU prior")
    parser.add_argument("--refit_updates", type=int, default=20, help="Adam steps per refit")
    parser.add_argument("--refit_encoder", action="store_true", help="refits train the critic's encoder too")
    parser.add_argument(
        "--state_columns", default="", help="columns of the policy group the state critic reads (all if unset)"
    )
    parser.add_argument("--rewards", nargs="+", default=["task", "learned"], choices=["task", "learned"])
    parser.add_argument("--no_end_on_done", action="store_true", help="the critic's done does not end episodes")
    parser.add_argument("--bc_init", action="store_true", help="both rewards start from the expert cloned by BC")
    parser.add_argument("--bc_updates", type=int, default=1000)
    parser.add_argument("--init_std", type=float, default=0.2, help="PPO's initial action std with --bc_init")
    parser.add_argument("--demo_noise", type=float, default=0.5, help="action noise in every other demonstration")
    parser.add_argument("--logdir", type=Path, default=Path("/tmp/rslkit_bench_learned_reward"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    own, train_flags = C.split_train_flags()
    args = parser.parse_args(own)
    args.overrides = train_flags
    torch.set_num_threads(1)
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "command": " ".join(sys.argv),
        "tasks": {},
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))

    for task in args.tasks:
        critic, metrics = train_critic(task, args.inputs, args, args.logdir / task / f"critic_{args.inputs}")
        entry = {"critic": {"inputs": args.inputs, **metrics}, "runs": []}
        results["tasks"][task] = entry
        print(f"{task} critic: {json.dumps(entry['critic'])}", flush=True)
        save()
        for seed in args.seeds:
            for reward in [f"learned:{critic}" if r == "learned" else r for r in args.rewards]:
                row = run_ppo(task, seed, reward, GOALS[task], args, args.logdir / task, args.inputs == "image")
                entry["runs"].append(row)
                print(f"{task} {json.dumps(row)}", flush=True)
                save()


if __name__ == "__main__":
    main()
