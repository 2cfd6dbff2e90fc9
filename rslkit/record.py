"""``python -m rslkit.record --task T --checkpoint C --episodes N --out DIR``: record demonstrations.

Runs the deterministic policy of a checkpoint written by ``train.py`` (any algorithm), optionally with Gaussian
action noise for imperfect demonstrations, and writes the episodes as a LeRobotDataset v3.0.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.data.lerobot_writer import write_lerobot_dataset
from rslkit.data.recorder import record_episodes
from rslkit.envs.registry import get_task
from rslkit.runners.registry import get_runner
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.config import apply_overrides, from_dict


def main(argv: list[str] | None = None) -> Path:
    """Parse the command line, rebuild env and policy from the checkpoint, record and write the dataset.

    Returns:
        The dataset directory.
    """
    parser = make_parser("Record demonstrations of a trained policy as a LeRobotDataset v3.0.")
    parser.add_argument("--task", required=True)
    parser.add_argument("--checkpoint", required=True, help="model_<iter>.pt written by train.py")
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
    parser.add_argument("--obs_group", default="policy", help="observation group stored as observation.state")
    parser.add_argument("--fps", type=int, default=None, help="recording rate (default: 1 / env dt, else 50)")
    parser.add_argument("--description", default=None, help="task description (default: the task name)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    args, overrides = parser.parse_known_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    if args.action_noise < 0:
        parser.error("--action_noise must be >= 0")
    if not 0.0 <= args.action_smoothing < 1.0:
        parser.error("--action_smoothing must be in [0, 1)")
    device = resolve_device(args.device)
    spec = get_task(args.task)
    saved = load_checkpoint(Path(args.checkpoint))
    if saved.get("task") != args.task:
        raise ValueError(
            f"Checkpoint '{args.checkpoint}' was trained on task '{saved.get('task')}', not '{args.task}'."
        )
    cfg_cls, runner_cls = get_runner(saved["algorithm"])
    env_cfg = from_dict(type(spec.env_cfg()), saved["env_cfg"])
    env_cfg.num_envs = args.num_envs or min(args.episodes, 256)
    env_cfg.seed = args.seed
    try:
        apply_overrides({"env": env_cfg}, overrides)
    except ValueError as err:
        parser.error(str(err))
    torch.manual_seed(args.seed)
    env = spec.make_env(env_cfg, device)
    runner = runner_cls(env, from_dict(cfg_cls, saved["agent_cfg"]), None, device)
    runner.load(args.checkpoint, weights_only=True)
    policy = runner.inference_policy()
    episodes = record_episodes(
        env,
        lambda obs: policy(obs.to(runner.device)).to(env.device),
        args.episodes,
        args.action_noise,
        args.obs_group,
        reset_policy=lambda dones: runner.reset_inference(dones.to(runner.device)),
        task=args.description or args.task,
        action_smoothing=args.action_smoothing,
    )
    dt = getattr(env_cfg, "dt", None)
    fps = args.fps or (round(1.0 / dt) if dt else 50)
    root = write_lerobot_dataset(args.out, episodes, fps, robot_type=args.task, overwrite=args.overwrite)
    returns = torch.tensor([float(ep.rewards.sum()) for ep in episodes if ep.rewards is not None])
    frames = sum(len(ep) for ep in episodes)
    spread = float(returns.std()) if returns.numel() > 1 else 0.0
    print(f"Wrote {len(episodes)} episodes ({frames} frames, return {returns.mean():.2f} ± {spread:.2f}) to {root}")
    return root


if __name__ == "__main__":
    run_cli(main)
