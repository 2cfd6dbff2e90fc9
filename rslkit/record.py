"""``python -m rslkit.record --task T --checkpoint C --episodes N --out DIR``: record demonstrations.

Runs the deterministic policy of a checkpoint written by ``train.py`` (any algorithm), or with ``--expert`` the
task's scripted expert (``TaskSpec.expert``, :mod:`rslkit.envs.expert`; no checkpoint), optionally with Gaussian
action noise for imperfect demonstrations (``--label policy`` keeps the noisy execution but stores the clean policy
action: DART demonstrations that show how the expert recovers), and writes the episodes as a LeRobotDataset v3.0.
``--camera NAME`` (repeatable) also records the env's camera ``NAME`` (observation group ``camera_NAME``; turn it on
with the env's config, e.g. ``--env.cameras NAME``) as the video feature ``observation.images.NAME``; ``--goal`` is
the language goal stored in ``meta/tasks.parquet``; tasks that draw an instruction per episode (``env.instructions``
and an observation group ``goal`` with its index, e.g. ``so101-pick-place``) store each episode's own instruction.
The env's observation and action names become the features' ``names`` in ``meta/info.json`` (what ``python -m
rslkit.rewards train --state_columns 'target_minus_ee.*'`` selects by).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.cli.sim_flag import add_sim_arg
from rslkit.data.lerobot_writer import write_lerobot_dataset
from rslkit.data.recorder import LABELS, TaskOf, episode_stats, record_episodes
from rslkit.data.video import DEFAULT_CODEC, check_encoder
from rslkit.envs.expert import expert_policy
from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP, episode_instructions
from rslkit.envs.registry import expert_for
from rslkit.envs.vec_env import control_period
from rslkit.recipes import build_env, load_run


def task_of(env: Any, goal: str | None, default: str) -> TaskOf:
    """Each recorded episode's language goal: ``goal`` if given; else the env's instruction of the episode (an env
    with ``instructions`` and a ``goal`` index group); else ``default`` (the task name)."""
    if goal:
        return goal
    if getattr(env, "instructions", None) and INSTRUCTION_INDEX_GROUP in env.get_observations().keys():
        return lambda obs: episode_instructions(env, obs[INSTRUCTION_INDEX_GROUP].reshape(-1).tolist()) or []
    return default


def column_names(env: Any, group: str | None) -> list[str] | None:
    """The env's column names of observation group ``group`` (its ``observation_names``), or None.

    Raises:
        ValueError: names of another length than the group's columns (checked before anything is recorded).
    """
    names = (getattr(env, "observation_names", None) or {}).get(group) if group else None
    obs = env.get_observations()
    if names is None or group not in obs.keys():  # a missing group: the recorder's error names it
        return None
    width = int(obs[group].shape[-1])
    if len(names) != width:
        raise ValueError(
            f"The env's observation_names['{group}'] has {len(names)} names for {width} columns; fix the task's "
            "observation_names, or record another --obs_group."
        )
    return list(names)


def main(argv: list[str] | None = None) -> Path:
    """Parse the command line, build env and policy (a checkpoint's, or the scripted expert), record and write.

    Returns:
        The dataset directory.
    """
    parser = make_parser("Record demonstrations of a trained policy or a scripted expert as a LeRobotDataset v3.0.")
    parser.add_argument("--checkpoint", help="model_<iter>.pt written by train.py, or its run directory")
    parser.add_argument(
        "--expert", action="store_true", help="record the task's scripted expert instead (needs --task)"
    )
    parser.add_argument("--task", help="task (default: the one the checkpoint records; required with --expert)")
    parser.add_argument("--episodes", type=int, default=100, help="number of episodes to record")
    parser.add_argument("--out", required=True, help="dataset directory to create")
    parser.add_argument("--action_noise", type=float, default=0.0, help="std of Gaussian noise added to actions")
    parser.add_argument(
        "--action_smoothing",
        type=float,
        default=0.0,
        help="alpha of the low-pass filter a_t = alpha a_(t-1) + (1 - alpha) policy(o_t) on executed actions",
    )
    parser.add_argument(
        "--label",
        choices=LABELS,
        default="executed",
        help="recorded action: the executed one (noise and smoothing included), or the clean policy action at the "
        "state the noisy execution reached (DART: demonstrations of recovery)",
    )
    parser.add_argument("--num_envs", type=int, default=None, help="parallel envs (default: min(episodes, 256))")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    add_sim_arg(parser)
    parser.add_argument("--obs_group", default="policy", help="observation group stored as observation.state")
    parser.add_argument(
        "--env_state_group",
        default=None,
        help="observation group stored as observation.environment_state: privileged simulator state (e.g. policy: "
        "cube and goal positions) that vla-bc can predict as an auxiliary target (--agent.aux_state)",
    )
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
    parser.add_argument(
        "--successful_only",
        action="store_true",
        help="keep only episodes that end solved (tasks that report success)",
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
    if bool(args.checkpoint) == bool(args.expert):
        parser.error("pass either --checkpoint C (a trained policy) or --expert (the task's scripted expert)")
    if args.expert and not args.task:
        parser.error("--expert needs --task NAME")
    if args.camera:
        check_encoder(args.video_codec)  # before recording, not after
    num_envs = args.num_envs or min(args.episodes, 256)
    reset_policy = None
    if args.expert:
        task = args.task
        env = build_env(task, overrides, num_envs=num_envs, seed=args.seed, device=resolve_device(args.device),
                        sim=args.sim)  # fmt: skip
        policy = expert_policy(expert_for(task, getattr(env, "cfg", None)), env.device)
    else:
        env, runner, saved = load_run(
            args.checkpoint,
            num_envs=num_envs,
            device=resolve_device(args.device),
            sim=args.sim,
            seed=args.seed,
            overrides=overrides,
            task=args.task,
        )
        task = str(saved.get("task") or args.task)
        inference = runner.inference_policy()
        policy = lambda obs: inference(obs.to(runner.device)).to(env.device)  # noqa: E731
        reset_policy = lambda dones: runner.reset_inference(dones.to(runner.device))  # noqa: E731
    obs_names, env_state_names = column_names(env, args.obs_group), column_names(env, args.env_state_group)
    refresh = 0.1 if sys.stderr.isatty() else 10.0  # a log file gets a line every 10 s, not every episode
    with tqdm(total=args.episodes, desc="recording", unit="episode", dynamic_ncols=True, mininterval=refresh) as bar:
        episodes = record_episodes(
            env,
            policy,
            args.episodes,
            args.action_noise,
            args.obs_group,
            reset_policy=reset_policy,
            task=task_of(env, args.goal, task),
            action_smoothing=args.action_smoothing,
            cameras=args.camera,
            on_episode=lambda episode: bar.update(1),
            label=args.label,
            env_state_group=args.env_state_group,
            successful_only=args.successful_only,
        )
    print(f"Writing {len(episodes)} episodes to {args.out} ...", flush=True)
    dt = control_period(env)
    fps = args.fps or (round(1.0 / dt) if dt else 50)
    root = write_lerobot_dataset(
        args.out,
        episodes,
        fps,
        robot_type=task,
        obs_names=obs_names,
        action_names=getattr(env, "action_names", None),
        overwrite=args.overwrite,
        video_codec=args.video_codec,
        env_state_names=env_state_names,
    )
    returns = torch.tensor([float(ep.rewards.sum()) for ep in episodes if ep.rewards is not None])
    frames = sum(len(ep) for ep in episodes)
    spread = float(returns.std()) if returns.numel() > 1 else 0.0
    success = episode_stats(episodes)["success_rate"]
    solved = "" if success != success else f", success {success:.0%}"  # NaN: the task reports no success
    print(
        f"Wrote {len(episodes)} episodes ({frames} frames, return {returns.mean():.2f} ± {spread:.2f}{solved}) to "
        f"{root}"
    )
    return root


if __name__ == "__main__":
    run_cli(main)
