"""``python play.py --task <name> --checkpoint PATH [--video out.mp4]``: evaluate a trained policy, and watch it."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.cli.sim_flag import add_sim_arg
from rslkit.recipes import load_run
from rslkit.runners.evaluation import evaluate_episodes


def evaluate(runner, env) -> dict[str, float]:
    """One deterministic episode per env (:func:`~rslkit.runners.evaluation.evaluate_episodes`, from the fresh env
    ``load_run`` built, so that the same seed gives the same episodes).

    Returns:
        The number of episodes, mean and std of return and length, and the success rate where the task reports
        success.
    """
    episodes = evaluate_episodes(env, runner.inference_policy(), runner.reset_inference, runner.device, reset=False)
    n = episodes.returns.numel()
    out = {
        "episodes": float(n),
        "return_mean": episodes.returns.mean().item(),
        "return_std": episodes.returns.std().item() if n > 1 else 0.0,
        "length_mean": episodes.lengths.mean().item(),
        "length_std": episodes.lengths.std().item() if n > 1 else 0.0,
    }
    if episodes.has_success:
        out["success_rate"] = episodes.success.float().mean().item()
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Parse the command line, rebuild the run from the checkpoint (:func:`rslkit.recipes.load_run`), evaluate."""
    parser = make_parser("Evaluate a trained policy (deterministic actions).")
    parser.add_argument("--checkpoint", required=True, help="model_<iter>.pt written by train.py, or its run directory")
    parser.add_argument("--task", help="expected task (default: the one the checkpoint records)")
    parser.add_argument("--episodes", type=int, default=100, help="number of episodes (one per parallel env)")
    parser.add_argument("--device", default="cpu")
    add_sim_arg(parser)
    parser.add_argument("--seed", type=int, default=1_000_003, help="seed of the evaluation envs")
    add_video_args(parser)
    args, overrides = parser.parse_known_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    check_video_args(parser, args)
    env, runner, saved = load_run(
        args.checkpoint,
        num_envs=args.episodes,
        device=resolve_device(args.device),
        sim=args.sim,
        seed=args.seed,
        overrides=overrides,
        task=args.task,
    )
    task = saved.get("task") or args.task
    stats = evaluate(runner, env)
    line = (
        f"{task}: {int(stats['episodes'])} episodes"
        f" | return {stats['return_mean']:.2f} ± {stats['return_std']:.2f}"
        f" | length {stats['length_mean']:.1f} ± {stats['length_std']:.1f}"
    )
    if "success_rate" in stats:
        line += f" | success {stats['success_rate']:.1%}"
    print(line)
    if not all(math.isfinite(v) for v in stats.values()):
        raise RuntimeError("Evaluation produced non-finite statistics.")
    if args.video:
        frames, fps = record_video(runner, env, args.video, args.video_length, *args.video_size)
        print(f"Wrote {args.video} ({frames} frames at {fps:.0f} fps, env 0).")
    return stats


# ----------------------------------------------------------------------------------------------- --video
VIDEO_MAX_FPS = 30.0
"""Frames are taken every k-th control step, the smallest k that keeps the video at or below this rate."""


def add_video_args(parser: argparse.ArgumentParser) -> None:
    """``--video PATH.mp4``, ``--video_length`` (control steps), ``--video_size WxH``."""
    parser.add_argument("--video", help="also write an mp4 of env 0 (offscreen MuJoCo rendering) to this path")
    parser.add_argument("--video_length", type=int, help="control steps to record (default: 3 episodes)")
    parser.add_argument("--video_size", default="320x240", help="WIDTHxHEIGHT in pixels, both even (default 320x240)")


def check_video_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Validate the video flags before any work, and that a headless OpenGL library is installed."""
    try:
        width, height = (int(v) for v in args.video_size.lower().split("x"))
    except ValueError:
        parser.error(f"--video_size must be WIDTHxHEIGHT (e.g. 320x240), got '{args.video_size}'")
    if width < 2 or height < 2 or width % 2 or height % 2:
        parser.error(f"--video_size needs even sizes >= 2 (H.264), got {width}x{height}")
    args.video_size = (width, height)
    if args.video_length is not None and args.video_length < 1:
        parser.error("--video_length must be >= 1")
    if not args.video:
        return
    if not args.video.lower().endswith(".mp4"):
        parser.error(f"--video must name an .mp4 file, got '{args.video}'")
    from rslkit.envs.mujoco.render import RenderingUnavailableError, gl_backend

    try:
        gl_backend()
    except RenderingUnavailableError as err:
        parser.error(str(err))


def record_video(
    runner, env, path: str | Path, steps: int | None = None, width: int = 320, height: int = 240
) -> tuple[int, float]:
    """Roll out the deterministic policy from a reset for ``steps`` control steps and write env 0 to an mp4.

    Args:
        steps: control steps (default: three episodes); a frame is taken at the reset and every k-th step after
            it, k chosen so that the video plays in real time at <= :data:`VIDEO_MAX_FPS`.

    Returns:
        ``(frames written, frames per second)``: ``1 + steps // k`` frames.

    Raises:
        ValueError: the task has no render hook (see :mod:`rslkit.envs.mujoco.render`).
    """
    from tqdm import tqdm

    from rslkit.envs.mujoco.render import RenderableTask
    from rslkit.utils.video import Mp4Writer

    can_render = isinstance(env, RenderableTask)  # a flag, not a narrowing: env is also a VecEnv
    if not can_render:
        raise ValueError(
            f"{type(env).__name__} cannot render: it has no render_frame(env_id, width, height) hook and step_dt "
            "(MuJoCo tasks add them with rslkit.envs.mujoco.render.BackendRenderer)."
        )
    steps = steps or 3 * int(torch.as_tensor(env.max_episode_length).max())
    stride = max(1, math.ceil(1.0 / (env.step_dt * VIDEO_MAX_FPS)))
    fps = 1.0 / (env.step_dt * stride)
    policy = runner.inference_policy()
    # Offscreen frames take ~0.4-2 s each on a busy CPU: without a bar a long video looks like a hang.
    bar = tqdm(total=steps, desc=f"rendering {Path(path).name}", unit="step", dynamic_ncols=True)
    with Mp4Writer(path, fps) as video, torch.inference_mode(), bar:  # the env holds inference tensors
        obs = env.reset()
        runner.reset_inference(torch.ones(env.num_envs, dtype=torch.bool, device=runner.device))
        video.append(env.render_frame(0, width, height))
        for t in range(1, steps + 1):
            obs, _, dones, _ = env.step(policy(obs.to(runner.device)).to(env.device))
            runner.reset_inference(dones.to(runner.device))
            if t % stride == 0:
                video.append(env.render_frame(0, width, height))
            bar.update(1)
    return video.frames, fps


if __name__ == "__main__":
    run_cli(main)
