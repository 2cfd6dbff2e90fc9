"""``python train.py --task <name>``: train a policy on a registered task."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.cli.sim_flag import add_sim_arg, apply_sim
from rslkit.envs.registry import get_task
from rslkit.runners.registry import get_runner
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint
from rslkit.utils.config import apply_overrides, from_dict, to_dict
from rslkit.utils.distributed import init_distributed, shutdown_distributed
from rslkit.utils.seeding import seed_everything


def task_dir_name(task: str) -> str:
    """Directory name of a task's runs (``gym:Hopper-v5`` -> ``gym_Hopper-v5``: no colons in paths)."""
    return task.replace(":", "_").replace("/", "_")


def _latest_run(task_dir: Path) -> Path:
    runs = sorted(p for p in task_dir.glob("*") if p.is_dir() and any(p.glob("model_*.pt")))
    if not runs:
        raise FileNotFoundError(f"--resume found no run with checkpoints under '{task_dir}'; pass --checkpoint PATH.")
    return runs[-1]


def main(argv: list[str] | None = None) -> Any:
    """Parse the command line, build env and runner, and train."""
    parser = make_parser("Train a policy on a registered task.")
    parser.add_argument("--task", required=True, help="registered task name (see below)")
    parser.add_argument("--algo", default="ppo", help="algorithm (default: ppo)")
    parser.add_argument("--num_envs", type=int, help="number of parallel envs")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default 0, or the resumed run's)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    add_sim_arg(parser)
    parser.add_argument("--max_iterations", type=int, help="total training iterations")
    parser.add_argument("--logdir", default="logs", help="root of run directories (default: logs)")
    parser.add_argument("--run_name", default="", help="suffix of the run directory name")
    parser.add_argument("--resume", action="store_true", help="continue a run exactly where it stopped")
    parser.add_argument("--checkpoint", help="checkpoint to resume (with --resume) or to initialize from")
    parser.add_argument("--dataset", help="demonstrations (LeRobotDataset v3.0 directory) for --algo flow-bc")
    parser.add_argument("--pretrained", help="flow-bc checkpoint to fine-tune with --algo reinflow")
    parser.add_argument(
        "--threads", type=int, help="torch intra-op CPU threads (default: torch's; 1 is fastest for small nets)"
    )
    args, overrides = parser.parse_known_args(argv)

    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    spec = get_task(args.task)
    if args.algo not in spec.agent_cfgs:
        parser.error(f"task '{args.task}' has no '{args.algo}' config; available: {sorted(spec.agent_cfgs)}")
    cfg_cls, runner_cls = get_runner(args.algo)
    dist_info, device = init_distributed(resolve_device(args.device))

    ckpt_path: Path | None = None
    saved = None
    if args.resume:
        ckpt_path = (
            Path(args.checkpoint) if args.checkpoint else latest_checkpoint(_latest_run(Path(args.logdir) / args.task))
        )
        saved = load_checkpoint(ckpt_path)
        if saved.get("algorithm") != args.algo:
            raise ValueError(
                f"Checkpoint '{ckpt_path}' was trained with --algo {saved.get('algorithm')}; resume with that --algo."
            )
        if saved.get("task") != args.task:
            raise ValueError(f"Checkpoint '{ckpt_path}' was trained on task '{saved.get('task')}', not '{args.task}'.")
        env_cfg = from_dict(type(spec.env_cfg()), saved["env_cfg"])
        agent_cfg = from_dict(cfg_cls, saved["agent_cfg"])
        seed = saved["seed"] if args.seed is None else args.seed
        run_dir = ckpt_path.parent
    else:
        env_cfg, agent_cfg = spec.env_cfg(), spec.agent_cfgs[args.algo]()
        seed = 0 if args.seed is None else args.seed
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        run_dir = (
            Path(args.logdir) / task_dir_name(args.task) / (stamp + (f"_{args.run_name}" if args.run_name else ""))
        )

    if args.num_envs is not None:
        env_cfg.num_envs = args.num_envs
    if args.max_iterations is not None:
        agent_cfg.max_iterations = args.max_iterations
    for flag in ("dataset", "pretrained"):
        value = getattr(args, flag)
        if value is not None:
            if not hasattr(agent_cfg, flag):
                parser.error(f"--{flag} does not apply to --algo {args.algo}")
            setattr(agent_cfg, flag, value)
    env_cfg.seed = seed + dist_info.rank
    try:
        apply_sim(env_cfg, args.sim, args.task)  # resuming on another backend is fine: the state layout is shared
        apply_overrides({"env": env_cfg, "agent": agent_cfg}, overrides)
    except ValueError as err:
        parser.error(str(err))

    seed_everything(seed + dist_info.rank)
    env = spec.make_env(env_cfg, device)
    run_info = {"task": args.task, "seed": seed, "env_cfg": to_dict(env_cfg)}
    runner = runner_cls(env, agent_cfg, run_dir, device, dist_info, run_info)
    if saved is not None and ckpt_path is not None:
        runner.load(ckpt_path)
        print(f"Resumed {ckpt_path} at iteration {runner.iteration}.")
    elif args.checkpoint:
        runner.load(args.checkpoint, weights_only=True)
        print(f"Initialized policy weights from {args.checkpoint}.")
    if dist_info.is_main:
        print(f"Task {args.task} | {env.num_envs} envs x {dist_info.world_size} process(es) | device {device}")
        print(f"Logging to {run_dir}")
    try:
        runner.learn()
    finally:
        shutdown_distributed()
    if dist_info.is_main:
        print_watch_hint(args.task, env, run_dir)
    return runner


def print_watch_hint(task: str, env, run_dir: Path) -> None:
    """After training a task that can render (``render_frame``, see rslkit.envs.mujoco.render), say how to watch it."""
    if not hasattr(env, "render_frame"):
        return
    ckpt = latest_checkpoint(run_dir)
    print(f"Watch the policy: python play.py --task {task} --checkpoint {ckpt} --video {run_dir / 'rollout.mp4'}")


if __name__ == "__main__":
    run_cli(main)
