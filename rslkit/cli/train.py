"""``python train.py --task <name>``: train a policy on a registered task; ``python train.py --algo vla-bc --dataset
DIR``: behaviour cloning from a robot's recordings alone (:mod:`rslkit.recipes.dataset_run`)."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.cli.sim_flag import add_sim_arg
from rslkit.envs.vec_env import VecEnv
from rslkit.recipes import build_run, latest_run, load_run, task_dir_name
from rslkit.recipes.dataset_run import bc_algorithm, build_dataset_run
from rslkit.recipes.learned_reward import RewardChoice, refuse_renamed_flags
from rslkit.runners.base import BaseRunner
from rslkit.utils.allocator import share_one_malloc_arena
from rslkit.utils.checkpoint import latest_checkpoint
from rslkit.utils.distributed import init_distributed, shutdown_distributed
from rslkit.utils.python_command import python_command


def main(argv: list[str] | None = None) -> Any:
    """Parse the command line, build env and runner (:func:`rslkit.recipes.build_run` / ``load_run``), and train."""
    share_one_malloc_arena()  # before torch starts its OpenMP threads (see rslkit.utils.allocator)
    parser = make_parser("Train a policy on a registered task, or clone a dataset's demonstrations with no simulator.")
    parser.add_argument(
        "--task",
        help="task name (see below), gym:<EnvId> or package.module:attribute; optional for flow-bc and vla-bc, "
        "which then train from --dataset alone",
    )
    parser.add_argument(
        "--algo",
        default="ppo",
        help="algorithm: ppo, sac, flow-bc, reinflow, vla-bc, vla-reinflow, distillation (default: ppo)",
    )
    parser.add_argument("--num_envs", type=int, help="number of parallel envs")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default 0, or the resumed run's)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    add_sim_arg(parser)
    parser.add_argument("--max_iterations", type=int, help="total training iterations")
    parser.add_argument("--logdir", default="logs", help="root of run directories (default: logs)")
    parser.add_argument("--run_name", default="", help="suffix of the run directory name")
    parser.add_argument("--resume", action="store_true", help="continue a run exactly where it stopped")
    parser.add_argument("--checkpoint", help="checkpoint to resume (with --resume) or to initialize from")
    parser.add_argument("--dataset", help="demonstrations (LeRobotDataset v3.0 directory) for --algo flow-bc or vla-bc")
    parser.add_argument(
        "--pretrained", help="checkpoint to fine-tune: flow-bc with --algo reinflow, vla-bc with --algo vla-reinflow"
    )
    parser.add_argument(
        "--threads", type=int, help="torch intra-op CPU threads (default: torch's; 1 is fastest for small nets)"
    )
    parser.add_argument(
        "--reward",
        default="task",
        help="task (the env's reward) or learned:PATH (a progress critic, rslkit.rewards); its settings are "
        "--reward.<field> (--reward.dead_band 0.02, --reward.refit.every 100: docs/rewards.md)",
    )
    args, overrides = parser.parse_known_args(argv)
    try:
        refuse_renamed_flags(overrides)
    except ValueError as err:
        parser.error(str(err))

    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    if args.num_envs is not None and args.num_envs < 1:
        parser.error("--num_envs must be >= 1")
    dist_info, device = init_distributed(resolve_device(args.device))
    common: dict[str, Any] = dict(
        num_envs=args.num_envs, device=device, sim=args.sim, max_iterations=args.max_iterations, dist_info=dist_info
    )
    try:
        env, runner = _build(parser, args, overrides, common)
    except ValueError as err:  # bad task, algorithm, override or config value: a usage error
        parser.error(str(err))
    run_dir = runner.log_dir
    assert run_dir is not None
    if dist_info.is_main:
        source = (
            f"Task {args.task} | {env.num_envs} envs" if args.task else f"Dataset {runner.cfg.dataset} | no simulator"
        )
        print(f"{source} x {dist_info.world_size} process(es) | device {device}")
        print(f"Logging to {run_dir}")
    try:
        runner.learn()
    finally:
        shutdown_distributed()
    if dist_info.is_main:
        if runner.interrupted:
            task = f"--task {args.task} " if args.task else ""
            print(
                f"Resume with: {python_command()} train.py {task}--algo {args.algo} --resume "
                f"--checkpoint {latest_checkpoint(run_dir)}"
            )
        print_watch_hint(env, run_dir)
    return runner


def _build(
    parser: argparse.ArgumentParser, args: argparse.Namespace, overrides: list[str], common: dict[str, Any]
) -> tuple[VecEnv, BaseRunner]:
    """The run of ``args``: resumed from a checkpoint, or new (optionally initialized from one)."""
    if not args.task:
        return _build_from_dataset(parser, args, overrides, common)
    if args.resume:
        if args.dataset or args.pretrained:
            parser.error("--dataset and --pretrained start a run; a resumed run keeps its own")
        if args.reward != "task":
            parser.error("--reward starts a run; a resumed run keeps the reward it was trained with")
        ckpt = Path(args.checkpoint) if args.checkpoint else latest_checkpoint(latest_run(args.logdir, args.task))
        env, runner, _ = load_run(
            ckpt, seed=args.seed, overrides=overrides, resume=True, task=args.task, algo=args.algo, **common
        )
        print(f"Resumed {ckpt} at iteration {runner.iteration}.")
    else:
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        name = stamp + (f"_{args.run_name}" if args.run_name else "")
        run_dir = Path(args.logdir) / task_dir_name(args.task) / name
        fields = {k: getattr(args, k) for k in ("dataset", "pretrained") if getattr(args, k) is not None}
        seed = 0 if args.seed is None else args.seed
        reward = RewardChoice(args.reward)
        env, runner = build_run(
            args.task,
            args.algo,
            overrides,
            seed=seed,
            agent_fields=fields,
            log_dir=run_dir,
            reward=reward,
            **common,
        )
        if args.checkpoint:
            runner.load(args.checkpoint, weights_only=True)
            print(f"Initialized policy weights from {args.checkpoint}.")
    return env, runner


def _build_from_dataset(
    parser: argparse.ArgumentParser, args: argparse.Namespace, overrides: list[str], common: dict[str, Any]
) -> tuple[VecEnv, BaseRunner]:
    """A behaviour-cloning run with no ``--task``: from ``--dataset`` alone, or resumed from its checkpoint."""
    bc_algorithm(args.algo)  # a simulator's algorithm without --task: the error names --task
    for flag, value in (("--sim", args.sim), ("--num_envs", args.num_envs), ("--pretrained", args.pretrained)):
        if value is not None:
            parser.error(f"{flag} applies to a run with a simulated --task; a run from --dataset alone has none.")
    if args.reward != "task":
        parser.error("--reward applies to a run with a simulated --task; behaviour cloning has no reward.")
    env_flags = [t.split("=")[0] for t in overrides if t.startswith("--env.")]
    if env_flags:
        parser.error(f"{env_flags[0]} applies to a run with a simulated --task; a run from --dataset alone has no env.")
    run_args = dict(device=common["device"], max_iterations=common["max_iterations"], dist_info=common["dist_info"])
    if args.resume:
        if args.dataset:
            parser.error("--dataset starts a run; a resumed run keeps its own")
        if not args.checkpoint:
            parser.error("--resume without --task needs --checkpoint PATH (the run to continue)")
        env, runner, _ = load_run(
            Path(args.checkpoint), seed=args.seed, overrides=overrides, resume=True, algo=args.algo, **run_args
        )
        print(f"Resumed {args.checkpoint} at iteration {runner.iteration}.")
        return env, runner
    if not args.dataset:
        parser.error(
            f"--algo {args.algo} without --task trains from a dataset alone: pass --dataset DIR (a LeRobotDataset "
            "v3.0), or --task NAME to train beside a simulated task."
        )
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    name = stamp + (f"_{args.run_name}" if args.run_name else "")
    run_dir = Path(args.logdir) / f"dataset_{Path(args.dataset).resolve().name}" / name
    seed = 0 if args.seed is None else args.seed
    env, runner = build_dataset_run(
        args.dataset, args.algo, overrides, seed=seed, agent_fields={"dataset": args.dataset}, log_dir=run_dir,
        **run_args,
    )  # fmt: skip
    if args.checkpoint:
        runner.load(args.checkpoint, weights_only=True)
        print(f"Initialized policy weights from {args.checkpoint}.")
    return env, runner


def print_watch_hint(env: VecEnv | object, run_dir: Path) -> None:
    """After training a task that can render (``render_frame``, see rslkit.envs.mujoco.render), say how to watch it."""
    if not hasattr(env, "render_frame"):
        return
    ckpt = latest_checkpoint(run_dir)
    print(f"Watch the policy: {python_command()} play.py --checkpoint {ckpt} --video {run_dir / 'rollout.mp4'}")


if __name__ == "__main__":
    run_cli(main)
