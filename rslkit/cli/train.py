"""``python train.py --task <name>``: train a policy on a registered task."""

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
from rslkit.recipes.learned_reward import RewardChoice
from rslkit.rewards.done_refit import DoneRefitCfg
from rslkit.rewards.value import ValueCfg
from rslkit.runners.base import BaseRunner
from rslkit.utils.allocator import share_one_malloc_arena
from rslkit.utils.checkpoint import latest_checkpoint
from rslkit.utils.distributed import init_distributed, shutdown_distributed
from rslkit.utils.python_command import python_command


def main(argv: list[str] | None = None) -> Any:
    """Parse the command line, build env and runner (:func:`rslkit.recipes.build_run` / ``load_run``), and train."""
    share_one_malloc_arena()  # before torch starts its OpenMP threads (see rslkit.utils.allocator)
    parser = make_parser("Train a policy on a registered task.")
    parser.add_argument("--task", required=True, help="task name (see below), gym:<EnvId> or package.module:attribute")
    parser.add_argument(
        "--algo", default="ppo", help="algorithm: ppo, sac, flow-bc, reinflow, vla-bc, vla-reinflow (default: ppo)"
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
        "--reward", default="task", help="task (the env's reward) or learned:PATH (a progress critic, rslkit.rewards)"
    )
    parser.add_argument("--reward_goal", help="language goal for --reward learned:PATH (default: the critic's goal)")
    parser.add_argument("--reward_stride", type=int, default=1, help="control steps between critic calls")
    parser.add_argument("--reward_dead_band", type=float, default=0.02, help="|progress| below this counts as 0")
    parser.add_argument(
        "--reward_done_threshold", type=float, default=0.9, help="critic done probability that ends an episode"
    )
    parser.add_argument(
        "--reward_end_on_done",
        type=lambda v: v.lower() in ("1", "true", "yes"),
        default=True,
        help="end episodes when the critic's done probability reaches the threshold (true|false, default true)",
    )
    parser.add_argument(
        "--reward_done_bonus", type=float, default=0.0, help="weight of the critic's done probability in each reward"
    )
    parser.add_argument(
        "--reward_scale",
        type=float,
        default=1.0,
        help="learned rewards are multiplied by this (SAC's temperature "
        "is tuned against the reward's scale; an episode's value increments sum to at most 1)",
    )
    parser.add_argument(
        "--reward_accumulate", default="vlac", help="vlac (VLAC's value recursion) or sum (the clipped sum of deltas)"
    )
    parser.add_argument(
        "--reward_progress_weight", type=float, default=1.0,
        help="weight of the value increments (0 with --reward_done_bonus > 0: the done classifier's reward alone)",
    )  # fmt: skip
    parser.add_argument(
        "--reward_done_term", default="prob",
        help="what --reward_done_bonus pays: prob (the done probability D) or log_odds (VICE: log D - log(1 - D))",
    )  # fmt: skip
    parser.add_argument(
        "--reward_refit_every", type=int, default=0,
        help="control steps between refits of the critic's done head on the run's own visits (VICE; 0: never)",
    )  # fmt: skip
    parser.add_argument("--reward_refit_updates", type=int, default=20, help="Adam steps per done-head refit")
    parser.add_argument(
        "--reward_refit_visit_prior", type=float, default=0.0,
        help="0: visits are the refits' negatives (VICE); pi > 0: unlabeled, a fraction pi done (nnPU loss)",
    )  # fmt: skip
    parser.add_argument(
        "--reward_refit_encoder", type=lambda v: v.lower() in ("1", "true", "yes"), default=False,
        help="refits train the critic's frame encoder too (true|false, default false: the done head alone)",
    )  # fmt: skip
    args, overrides = parser.parse_known_args(argv)

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
        print(f"Task {args.task} | {env.num_envs} envs x {dist_info.world_size} process(es) | device {device}")
        print(f"Logging to {run_dir}")
    try:
        runner.learn()
    finally:
        shutdown_distributed()
    if dist_info.is_main:
        if runner.interrupted:
            print(
                f"Resume with: {python_command()} train.py --task {args.task} --algo {args.algo} --resume "
                f"--checkpoint {latest_checkpoint(run_dir)}"
            )
        print_watch_hint(env, run_dir)
    return runner


def _build(
    parser: argparse.ArgumentParser, args: argparse.Namespace, overrides: list[str], common: dict[str, Any]
) -> tuple[VecEnv, BaseRunner]:
    """The run of ``args``: resumed from a checkpoint, or new (optionally initialized from one)."""
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
        value = ValueCfg(
            args.reward_dead_band,
            args.reward_stride,
            args.reward_done_threshold,
            done_bonus=args.reward_done_bonus,
            end_on_done=args.reward_end_on_done,
            reward_scale=args.reward_scale,
            accumulate=args.reward_accumulate,
            progress_weight=args.reward_progress_weight,
            done_term=args.reward_done_term,
        )
        refit = DoneRefitCfg(
            args.reward_refit_every,
            args.reward_refit_updates,
            visit_prior=args.reward_refit_visit_prior,
            encoder=args.reward_refit_encoder,
        )
        reward = RewardChoice(args.reward, args.reward_goal, value, refit if refit.every > 0 else None)
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


def print_watch_hint(env: VecEnv | object, run_dir: Path) -> None:
    """After training a task that can render (``render_frame``, see rslkit.envs.mujoco.render), say how to watch it."""
    if not hasattr(env, "render_frame"):
        return
    ckpt = latest_checkpoint(run_dir)
    print(f"Watch the policy: {python_command()} play.py --checkpoint {ckpt} --video {run_dir / 'rollout.mp4'}")


if __name__ == "__main__":
    run_cli(main)
