"""so101-lift through the real-world loop: success vs episodes with and without demonstrations and interventions.

Run (results in benchmarks/results/realworld_so101_lift.json, written after each configuration):

    .venv/bin/python benchmarks/realworld_so101_lift.py --episodes 200

First 20 demonstrations are recorded with the task's scripted expert
(``rslkit/envs/tasks/so101_lift_expert.py``) into a LeRobot dataset.
Then, for each configuration, one ``python -m rslkit.realworld local --task so101-lift`` run inside ``unshare -n``:

- ``demos+interventions``: the demonstrations seed the demonstration buffer (half of every batch, RLPD) and a BC
  warm start; the scripted "human" takes over when the policy stalls, with a takeover probability that decays by
  ``--decay`` per episode (HIL-SERL's human, scripted);
- ``interventions``: the scripted human only; ``demos``: the demonstrations only; ``none``: plain SAC.

The actor runs unpaced and in lockstep with the learner (``--actor.realtime false --actor.lockstep true``): each
episode waits until the learner did the updates it owes (UTD ``--utd``), so the curves measure sample efficiency
in episodes, not this machine's speed. Success is the task's own (the cube ``lift_height`` up at the episode's end).
After each run the learner's last checkpoint is also evaluated without exploration noise (``play.py --checkpoint RUN
--episodes --eval_episodes``: deterministic actions, one episode per env from fresh start states). Everything
after ``--`` goes to every run (``-- --agent.policy.num_critics 10``).

``--learned_reward`` hides the task's reward from the learner (issue 15): a state progress critic is trained on
``--critic_demos`` other scripted episodes (``learned_reward_rl.train_critic``: half with action noise, graded on
20 % held out), the demonstrations are relabelled with it (``rslkit.realworld.relabel``, as ``python -m
rslkit.rewards relabel`` does) and the actor scores every transition with it
(``--actor.reward learned`` with ``--actor.learned_reward.*``: ``scale`` from ``--reward_scale``, ``done_bonus``
``--reward_done_bonus``, ``progress_weight`` ``--reward_progress_weight``, ``accumulate`` ``--reward_accumulate``).
Success stays the task's own.
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
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "realworld_so101_lift.json"
CONFIGS = {
    "demos+interventions": ("demos", "interventions"),
    "none": (),
    "demos": ("demos",),
    "interventions": ("interventions",),
}


def record_demos(path: Path, episodes: int, seed: int) -> dict[str, float]:
    """Record ``episodes`` expert episodes of so101-lift into the LeRobot dataset ``path`` (for
    ``--agent.demo_path``); the expert's figures on these episodes."""
    from rslkit.data.lerobot_writer import write_lerobot_dataset
    from rslkit.data.recorder import episode_stats, record_episodes
    from rslkit.envs.expert import expert_policy
    from rslkit.envs.registry import expert_for, get_task

    spec = get_task("so101-lift")
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = 1, seed
    env = spec.make_env(cfg, "cpu")
    demos = record_episodes(env, expert_policy(expert_for("so101-lift", cfg), env.device), episodes)
    fps = round(1.0 / env.step_dt)
    write_lerobot_dataset(path, demos, fps, robot_type="so101", obs_names=env.observation_names.get("policy"),
                          action_names=env.action_names, overwrite=True)  # fmt: skip
    return {"transitions": float(sum(len(ep.actions) for ep in demos)), **episode_stats(demos)}


def train_lift_critic(args: argparse.Namespace, logdir: Path) -> tuple[Path, dict[str, Any]]:
    """A state progress critic of so101-lift from scripted episodes; its path and held-out metrics."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from learned_reward_rl import train_critic

    settings = argparse.Namespace(
        demos=args.critic_demos, critic_steps=args.critic_steps, demo_noise=0.5, state_columns=args.critic_state_columns
    )
    path, metrics = train_critic("so101-lift", "state", settings, logdir / "critic")
    return path, metrics


def relabel(demos: Path, critic: Path, args: argparse.Namespace) -> tuple[Path, dict[str, float]]:
    """``demos`` with the critic's rewards (what the actor's plug-in gives online); the new dataset and mean
    returns."""
    from rslkit.realworld.relabel import relabel_dataset
    from rslkit.rewards.loop_reward import LoopProgressReward

    reward = LoopProgressReward(str(critic), dead_band=args.reward_dead_band, scale=args.reward_scale,
                                done_bonus=args.reward_done_bonus, accumulate=args.reward_accumulate,
                                progress_weight=args.reward_progress_weight)  # fmt: skip
    path = demos.with_name("demos_critic")
    data, rewards = relabel_dataset(demos, path, reward, overwrite=True)
    episodes = float(data.num_episodes)
    assert data.rewards is not None, "the recorded demonstrations carry the task's rewards"
    return path, {"task_return": float(data.rewards.sum()) / episodes, "critic_return": float(rewards.sum()) / episodes}


def run_config(
    name: str, parts: tuple[str, ...], args: argparse.Namespace, demos: Path, logdir: Path, critic: Path | None
) -> Path:
    run_name = "bench_" + name.replace("+", "_")
    cmd = [
        sys.executable, "-m", "rslkit.realworld", "local", "--task", "so101-lift", "--seed", str(args.seed),
        "--logdir", str(logdir), "--run_name", run_name, "--max_iterations", "1000000", "--agent.logger", "",
        "--actor.max_episodes", str(args.episodes), "--actor.realtime", "false", "--actor.lockstep", "true",
        "--actor.random_steps", "0" if "demos" in parts else "500", "--agent.algorithm.utd_ratio", str(args.utd),
        "--agent.algorithm.gamma", "0.97",
        "--agent.policy.actor_hidden_dims", "(256,256)", "--agent.policy.critic_hidden_dims", "(256,256)",
    ]  # fmt: skip
    if "demos" in parts:
        cmd += ["--agent.demo_path", str(demos), "--learner.bc_warmstart_updates", str(args.bc_updates)]
    if "interventions" in parts:
        cmd += ["--actor.interventions", "scripted", "--actor.takeover_decay", str(args.decay)]
    if critic is not None:
        learned = {"model": critic, "scale": args.reward_scale, "done_bonus": args.reward_done_bonus,
                   "dead_band": args.reward_dead_band, "accumulate": args.reward_accumulate,
                   "progress_weight": args.reward_progress_weight}  # fmt: skip
        cmd += ["--actor.reward", "learned"]
        cmd += [token for k, v in learned.items() for token in (f"--actor.learned_reward.{k}", str(v))]
    cmd += args.extra
    lo_up = f"{sys.executable} {ROOT / 'tests' / 'ros2' / 'lo_up.py'}"
    quoted = " ".join(f"'{c}'" for c in cmd)
    full = ["unshare", "-n", "sh", "-c", f"{lo_up} && {quoted}"] if shutil.which("unshare") else cmd
    with (logdir / f"{run_name}.log").open("w") as f:
        subprocess.run(full, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=args.timeout)
    return sorted((logdir / "so101-lift").glob(f"*_realworld_{run_name}"))[-1]


def analyse(run_dir: Path, window: int) -> dict[str, Any]:
    with (run_dir / "actor-0" / "episodes.csv").open() as f:
        episodes = list(csv.DictReader(f))
    success = [float(e["success"] or 0) > 0 for e in episodes]
    rate = [float(e["intervention_rate"]) for e in episodes]
    moving = [sum(success[max(0, i + 1 - window) : i + 1]) / min(window, i + 1) for i in range(len(success))]
    first_90 = next((i + 1 for i, m in enumerate(moving) if i + 1 >= window and m >= 0.9), None)
    per_block = [
        {
            "episodes": f"{b + 1}-{min(b + 20, len(success))}",
            "success": sum(success[b : b + 20]) / len(success[b : b + 20]),
            "intervention_rate": sum(rate[b : b + 20]) / len(rate[b : b + 20]),
        }
        for b in range(0, len(success), 20)
    ]
    return {
        "run_dir": str(run_dir),
        "episodes": len(episodes),
        "first_episode_with_90pct_over_window": first_90,
        "final_window_success": moving[-1] if moving else None,
        "blocks_of_20": per_block,
        "success": [int(s) for s in success],
        "intervention_rate": rate,
    }


def evaluate_final(run_dir: Path, episodes: int, seed: int) -> dict[str, float]:
    """Deterministic success of the learner's last checkpoint in ``run_dir`` over ``episodes`` fresh episodes."""
    from rslkit.cli.play import main as play

    return play(["--checkpoint", str(run_dir), "--episodes", str(episodes), "--seed", str(10_000 + seed)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--demos", type=int, default=20)
    parser.add_argument("--utd", type=float, default=4.0)
    parser.add_argument("--bc-updates", type=int, default=1000)
    parser.add_argument("--decay", type=float, default=0.98)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3 * 3600)
    parser.add_argument("--logdir", default="/tmp/rslkit_bench_so101_lift")
    parser.add_argument("--eval_episodes", type=int, default=100, help="deterministic episodes of the final policy")
    parser.add_argument("--learned_reward", action="store_true", help="train on a state critic's reward only")
    parser.add_argument("--critic_demos", type=int, default=60, help="scripted episodes the critic learns from")
    parser.add_argument("--critic_steps", type=int, default=1500)
    parser.add_argument(
        "--critic_state_columns", default="", help="columns of the policy state the critic reads (all when empty)"
    )
    parser.add_argument("--reward_scale", type=float, default=100.0)
    parser.add_argument("--reward_done_bonus", type=float, default=0.0)
    parser.add_argument("--reward_dead_band", type=float, default=0.02)
    parser.add_argument("--reward_accumulate", default="vlac", choices=["vlac", "sum"])
    parser.add_argument("--reward_progress_weight", type=float, default=1.0, help="0: the done classifier alone")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON written after each configuration")
    parser.epilog = C.TRAIN_FLAGS_HELP
    own, extra = C.split_train_flags()
    args = parser.parse_args(own)
    args.extra = extra
    torch.set_num_threads(1)
    logdir = Path(args.logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    demos = logdir / "demos"
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
        "demos": record_demos(demos, args.demos, args.seed),
        "configs": {},
    }
    print(f"demonstrations: {results['demos']}", flush=True)
    critic = None
    if args.learned_reward:
        t0 = time.time()
        critic, metrics = train_lift_critic(args, logdir)
        demos, returns = relabel(demos, critic, args)
        results["critic"] = {"path": str(critic), "train_s": time.time() - t0, **metrics, "demo_returns": returns}
        print(f"critic: {json.dumps(results['critic'])}", flush=True)
    for name in args.configs:
        t0 = time.time()
        run_dir = run_config(name, CONFIGS[name], args, demos, logdir, critic)
        result = analyse(run_dir, args.window)
        result["wall_s"] = time.time() - t0
        if args.eval_episodes > 0:
            result["final_policy_eval"] = evaluate_final(run_dir, args.eval_episodes, args.seed)
        results["configs"][name] = result
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
        blocks = " ".join(f"{b['success']:.2f}/{b['intervention_rate']:.2f}" for b in result["blocks_of_20"])
        print(f"{name}: 90% at episode {result['first_episode_with_90pct_over_window']}; per 20 episodes "
              f"success/intervention rate {blocks}; {result['wall_s']:.0f} s; final policy "
              f"{result.get('final_policy_eval')}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
