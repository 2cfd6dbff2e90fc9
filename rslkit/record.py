"""``python -m rslkit.record --task T --checkpoint C --episodes N --out DIR``: record demonstrations.

Runs the deterministic policy of a checkpoint written by ``train.py`` (any algorithm), optionally with Gaussian
action noise for imperfect demonstrations, and writes the episodes as a LeRobotDataset v3.0. ``--camera NAME``
(repeatable) also records the env's camera ``NAME`` (observation group ``camera_NAME``; turn it on with the env's
config, e.g. ``--env.cameras NAME``) as the video feature ``observation.images.NAME``; ``--goal`` is the language
goal stored in ``meta/tasks.parquet``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.cli.sim_flag import add_sim_arg
from rslkit.data.lerobot_writer import write_lerobot_dataset
from rslkit.data.recorder import record_episodes
from rslkit.data.video import DEFAULT_CODEC, check_encoder
from rslkit.envs.vec_env import control_period
from rslkit.recipes import load_run


def main(argv: list[str] | None = None) -> Path:
    """Parse the command line, rebuild env and policy from the checkpoint, record and write the dataset.

    Returns:
        The dataset directory.
    """
    parser = make_parser("Record demonstrations of a trained policy as a LeRobotDataset v3.0.")
    parser.add_argument("--checkpoint", required=True, help="model_<iter>.pt written by train.py, or its run directory")
    parser.add_argument("--task", help="expected task (default: the one the checkpoint records)")
    parser.add_argument("--episodes", type=int, default=100, help="number of episodes to record")
    parser.add_argument("--out", required=True, help="dataset directory to create")
    parser.add_argument("--action_noise", type=float, default=0.0, help="std of Gaussian noise added to actions")
    parser.add_argument(
        "--action_smoothing",
        type=float,
        default=0.0,
        help="alpha of the low-pass filter a_t = alpha a_(t-1) + (1 - alpha) policy(o_t) on executed actions",
    )
    parser.add_argument("--num_envs", type=int, default=None, help="parallel envs (default: min(episodes, 256))")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    add_sim_arg(parser)
    parser.add_argument("--obs_group", default="policy", help="observation group stored as observation.state")
    parser.add_argument("--fps", type=int, default=None, help="recording rate (default: 1 / env dt, else 50)")
    parser.add_argument(
        "--goal",
        "--description",
        dest="goal",
        default=None,
        help="language goal stored as each episode's task in meta/tasks.parquet (default: the task name)",
    )
    parser.add_argument(
        "--camera",
        action="append",
        default=[],
        metavar="NAME",
        help="record camera NAME (observation group camera_NAME) as a video feature; repeatable",
    )
    parser.add_argument(
        "--video_codec", default=DEFAULT_CODEC, help="PyAV encoder of camera videos (libsvtav1 = AV1, or libx264)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    args, overrides = parser.parse_known_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    if args.action_noise < 0:
        parser.error("--action_noise must be >= 0")
    if not 0.0 <= args.action_smoothing < 1.0:
        parser.error("--action_smoothing must be in [0, 1)")
    if args.num_envs is not None and args.num_envs < 1:
        parser.error("--num_envs must be >= 1")
    if args.camera:
        check_encoder(args.video_codec)  # before recording, not after
    env, runner, saved = load_run(
        args.checkpoint,
        num_envs=args.num_envs or min(args.episodes, 256),
        device=resolve_device(args.device),
        sim=args.sim,
        seed=args.seed,
        overrides=overrides,
        task=args.task,
    )
    task = str(saved.get("task") or args.task)
    policy = runner.inference_policy()
    episodes = record_episodes(
        env,
        lambda obs: policy(obs.to(runner.device)).to(env.device),
        args.episodes,
        args.action_noise,
        args.obs_group,
        reset_policy=lambda dones: runner.reset_inference(dones.to(runner.device)),
        task=args.goal or task,
        action_smoothing=args.action_smoothing,
        cameras=args.camera,
    )
    dt = control_period(env)
    fps = args.fps or (round(1.0 / dt) if dt else 50)
    root = write_lerobot_dataset(
        args.out, episodes, fps, robot_type=task, overwrite=args.overwrite, video_codec=args.video_codec
    )
    returns = torch.tensor([float(ep.rewards.sum()) for ep in episodes if ep.rewards is not None])
    frames = sum(len(ep) for ep in episodes)
    spread = float(returns.std()) if returns.numel() > 1 else 0.0
    print(f"Wrote {len(episodes)} episodes ({frames} frames, return {returns.mean():.2f} ± {spread:.2f}) to {root}")
    return root


if __name__ == "__main__":
    run_cli(main)
