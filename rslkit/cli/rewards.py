"""``python -m rslkit.rewards train | eval | relabel``: train a VLAC-style progress critic on LeRobot datasets, grade
one, relabel the real-world loop's demonstrations with it.

python -m rslkit.rewards train --dataset data/lift --camera front --out critics/lift
python -m rslkit.rewards eval --model critics/lift/model.safetensors --dataset data/lift_test --plot v.png
python -m rslkit.rewards relabel --model critics/lift/model.safetensors --demos data/demos --out data/demos_critic
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from rslkit.cli.common import run_cli
from rslkit.data.demonstrations import OBS_KEY
from rslkit.data.lerobot_meta import feature_names, read_info
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.envs.columns import select_state_columns
from rslkit.models.text_encoder import MINILM
from rslkit.rewards.datasets import concat_progress_data, progress_data, split_episodes
from rslkit.rewards.evaluation import evaluate_critic
from rslkit.rewards.pairs import PairSamplerCfg, ProgressData, check_pair_data
from rslkit.rewards.plots import plot_values
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, load_progress_model
from rslkit.rewards.training import ProgressTrainCfg, train_progress_model


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", action="append", required=True, help="LeRobotDataset v3 directory (repeatable)")
    p.add_argument("--goal", help="language goal of every episode (datasets without task strings)")
    p.add_argument("--failed_episodes", default="", help="comma-separated positions of failed episodes")
    p.add_argument("--stride", type=int, default=1, help="frames between scored pairs in evaluation")
    p.add_argument("--dead_band", type=float, default=0.0, help="|delta| below this counts as 0 in evaluation")
    p.add_argument("--distractor_goal", action="append", default=[], help="an instruction no episode follows")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")


def _load(args: argparse.Namespace, cameras: list[str], state_group: str | None) -> ProgressData:
    failed = [int(x) for x in args.failed_episodes.split(",") if x.strip()]
    parts = [
        progress_data(read_lerobot_dataset(d, cameras=cameras), cameras, state_group, args.goal, failed)
        for d in args.dataset
    ]
    return concat_progress_data(parts)


def _state_names(dataset: str) -> list[str] | None:
    """The ``observation.state`` column names of a dataset's ``meta/info.json``, or None."""
    return feature_names(read_info(Path(dataset)), OBS_KEY)


def _train(args: argparse.Namespace) -> Path:
    data = _load(args, args.camera, args.state_group)
    state_dim = int(data.frames[args.state_group].shape[-1]) if args.state_group else 0
    names = _state_names(args.dataset[0]) if state_dim else None
    columns = select_state_columns(args.state_columns, state_dim, names) if state_dim else ()
    if args.state_columns:
        print(f"The critic reads state columns {list(columns)}" + (f": {[names[c] for c in columns]}" if names else ""))
    train, held_out = split_episodes(data, args.holdout, args.seed)
    image_size = (16, 16)
    if args.camera:
        image_size = tuple(data.frames[f"camera_{args.camera[0]}"].shape[1:3])  # type: ignore[assignment]
    cfg = ProgressModelCfg(
        cameras=tuple(args.camera), image_size=image_size, state_group=args.state_group, state_dim=state_dim,
        state_columns=columns if len(columns) < state_dim else (), vision_backbone=args.vision_backbone,
        text_encoder=args.text_encoder,
    )  # fmt: skip
    torch.manual_seed(args.seed)
    model = ProgressModel(cfg)
    sampler = PairSamplerCfg(distractor_goals=tuple(args.distractor_goal), done_frames=args.done_frames)
    check_pair_data(train, sampler)  # before anything is written to --out
    train_cfg = ProgressTrainCfg(
        steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, eval_every=args.eval_every,
        seed=args.seed, sampler=sampler,
    )  # fmt: skip

    def evaluate(m: ProgressModel) -> dict[str, float]:
        if held_out is None:
            return {}
        return evaluate_critic(m, held_out, args.stride, args.dead_band, args.done_frames, args.distractor_goal)

    print(f"{train.num_episodes} training / {held_out.num_episodes if held_out else 0} held-out episodes, goals "
          f"{sorted(set(data.goals))}")  # fmt: skip
    train_progress_model(model, train, train_cfg, args.out, evaluate, resume=args.resume)
    path = Path(args.out) / "model.safetensors"
    print(f"Wrote {path}")
    return path


def _eval(args: argparse.Namespace) -> dict[str, float]:
    model, _ = load_progress_model(args.model)
    data = _load(args, list(model.cfg.cameras), model.cfg.state_group)
    metrics = evaluate_critic(model, data, args.stride, args.dead_band, args.done_frames, args.distractor_goal)
    print(json.dumps(metrics, indent=1))
    if args.plot:
        print(f"Wrote {plot_values(model, data, args.plot, args.stride, args.dead_band)}")
    return metrics


def _relabel(args: argparse.Namespace, settings: list[str]) -> dict[str, float]:
    from rslkit.realworld.relabel import relabel_dataset
    from rslkit.realworld.rewards import load_reward
    from rslkit.rewards.loop_reward import LoopRewardCfg
    from rslkit.utils.config import apply_overrides

    learned = LoopRewardCfg()
    apply_overrides({"learned_reward": learned}, settings)
    if settings and args.reward != "learned":
        raise ValueError(f"--learned_reward.* settings are for --reward learned, not --reward {args.reward}.")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"--out {out} exists; choose another --out, or pass --overwrite to replace it.")
    reward = load_reward(args.reward, learned, flag="--reward")
    if reward is None:
        raise ValueError(
            "--reward task keeps the rewards the demonstrations were recorded with: nothing to relabel. Pass "
            "--reward learned --learned_reward.model CRITIC, or --reward package.module:function."
        )
    demos, rewards = relabel_dataset(args.demos, out, reward, args.obs_group, overwrite=args.overwrite)
    episodes = max(demos.num_episodes, 1)
    summary = {
        "transitions": float(demos.num_frames),
        "episodes": float(demos.num_episodes),
        "return_before": float(demos.rewards.sum() / episodes) if demos.rewards is not None else float("nan"),
        "return_after": float(rewards.sum() / episodes),
    }
    print(json.dumps(summary, indent=1))
    print(f"Wrote {out} (train on it with --agent.demo_path {out})")
    return summary


def main(argv: list[str] | None = None) -> object:
    """Parse ``train`` / ``eval`` / ``relabel`` and run it."""
    parser = argparse.ArgumentParser(prog="python -m rslkit.rewards", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train a progress critic on demonstrations")
    _data_args(tr)
    tr.add_argument("--out", required=True, help="output directory (model.safetensors, optimizer.pt, history.json)")
    tr.add_argument("--camera", action="append", default=[], help="camera the critic looks at (repeatable)")
    tr.add_argument("--state_group", default=None, help="also read observation.state, as this env group (policy)")
    tr.add_argument(
        "--state_columns",
        default="",
        help="columns of the state the critic reads: indices, start:stop ranges, name globs (0:6,ee.*); all if unset",
    )
    tr.add_argument("--steps", type=int, default=3000)
    tr.add_argument("--batch_size", type=int, default=128)
    tr.add_argument("--lr", type=float, default=3e-4)
    tr.add_argument("--eval_every", type=int, default=500)
    tr.add_argument("--holdout", type=float, default=0.2, help="fraction of episodes held out for evaluation")
    tr.add_argument("--done_frames", type=int, default=3, help="final frames of an episode labelled done")
    tr.add_argument("--vision_backbone", default=None, help="local transformers vision model (frozen) for the CNN")
    tr.add_argument("--text_encoder", default=MINILM, help="sentence encoder: minilm or a local model directory")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--resume", action="store_true", help="continue the run in --out")
    ev = sub.add_parser("eval", help="VOC, reversed VOC, mismatched-goal |delta|, done AUROC on a dataset")
    _data_args(ev)
    ev.add_argument("--model", required=True, help="model.safetensors written by train")
    ev.add_argument("--done_frames", type=int, default=3)
    ev.add_argument("--plot", help="PNG of value and done probability over time")
    rl = sub.add_parser(
        "relabel",
        help="replace the rewards of --agent.demo_path demonstrations with the actor's reward plug-in's",
        description="RLPD draws half of every batch from the demonstrations: their rewards must be the ones the "
        "actor's --actor.reward gives online. Pass the same --reward and settings as the actor's.",
    )
    rl.add_argument("--demos", required=True, help="demonstrations: a LeRobotDataset v3.0 folder (rslkit.record)")
    rl.add_argument("--out", required=True, help="the relabelled LeRobotDataset v3.0 folder to write")
    rl.add_argument("--obs_group", default="policy", help="observation group observation.state is (the plug-in's)")
    rl.add_argument(
        "--reward",
        required=True,
        help="the actor's --actor.reward: 'learned' (the progress critic; its settings as on the actor, "
        "--learned_reward.<field> for --actor.learned_reward.<field>: model, goal, dead_band, scale, done_bonus, "
        "progress_weight, accumulate) or a plug-in package.module:function",
    )
    rl.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    rl.add_argument("--overwrite", "--force", dest="overwrite", action="store_true", help="replace a dataset at --out")
    args, settings = parser.parse_known_args(argv)
    if settings and args.command != "relabel":
        parser.error(f"unrecognized arguments: {' '.join(settings)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.command == "train":
        if not args.camera and args.state_group is None:
            parser.error("train needs --camera NAME and/or --state_group GROUP: what the critic looks at")
        if args.state_columns and args.state_group is None:
            parser.error("--state_columns selects columns of the state: pass --state_group too")
        return _train(args)
    if args.command == "relabel":
        return _relabel(args, settings)
    return _eval(args)


if __name__ == "__main__":
    run_cli(main)
