"""Why a VLA policy fails on ``so101-pick-place``: where its grasps land, whether its first chunk follows the cube,
and whether its image encoder can localize the cube at all.

    .venv/bin/python benchmarks/vla_diagnostics.py rollouts --checkpoint RUN/model_50.pt --episodes 64
    .venv/bin/python benchmarks/vla_diagnostics.py localization --dataset W/pick_place --camera table --steps 1000

``rollouts`` runs ``--episodes`` deterministic episodes (seed 20000, as ``vla_pick_place.py``'s evaluation) and
reports: the share of episodes that ever grasp, lift and succeed; at each episode's first gripper close, the
horizontal distance from the pads' midpoint to the cube (grasped and missed episodes apart); the R^2 of a linear fit
of the first chunk's last arm action on the cube's xy over the episodes (near 0: the policy's first move ignores where
the cube is); and, for a run trained with a state probe (``--agent.aux_state``), the probe's cube error at reset.

``localization`` trains the policy's image encoder (keypoint or grid tokens, the recipe's CNN) with a linear head to
regress the cube's xy from the dataset's frames (``observation.environment_state`` columns 15-16: record with
``--env_state_group policy``) of the first 80 % of the episodes, optionally only their first ``--early`` frames (the
cube still on the floor), and reports the error on the held-out episodes' first frames and on fresh renders at reset
(raw frames, not video-decoded). A colour threshold locates the cube to 4 mm in the same frames.

Results: benchmarks/results/vla_diagnostics.json (``--out``), one entry per command line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import torch  # noqa: E402

TASK = "so101-pick-place"
EVAL_SEED = 20_000
CUBE_XY = slice(15, 17)
"""Columns of the cube's x, y in so101-pick-place's ``policy`` group."""


def task_of(env: Any) -> Any:
    """The ``SO101PickPlaceTask`` under any wrappers."""
    while not hasattr(env, "cube_pos") and hasattr(env, "env"):
        env = env.env
    return env


def r_squared(x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """R^2 of the least-squares fit ``y [N, K] ~ x [N, D] w + b``, per column of ``y``."""
    design = torch.cat([x, torch.ones(len(x), 1)], 1).double()
    residual = y.double() - design @ torch.linalg.lstsq(design, y.double()).solution
    return (1 - residual.pow(2).sum(0) / (y.double() - y.double().mean(0)).pow(2).sum(0)).tolist()


def rollouts(checkpoint: Path, episodes: int) -> dict[str, Any]:
    """Grasp, lift and success rates, the error at the first close and the first chunk's dependence on the cube."""
    from rslkit.recipes.run import load_run
    from rslkit.runners.evaluation import evaluate_episodes
    from rslkit.utils.checkpoint import load_checkpoint

    env, runner, _ = load_run(checkpoint, num_envs=episodes, seed=EVAL_SEED)
    task, policy = task_of(env), runner.policy
    env.reset()
    obs = env.get_observations()
    with torch.no_grad():
        first = policy.act_chunk(
            runner.data.instructions.add_to(obs), torch.zeros(episodes, policy.horizon, policy.action_dim)
        )
    out: dict[str, Any] = {"checkpoint": str(checkpoint), "episodes": episodes}
    out["first_chunk_r2_on_cube_xy"] = r_squared(task.cube_pos[:, :2].cpu(), first[:, -1, :5].cpu())
    probe = getattr(runner.alg, "probe", None)
    if probe is not None:
        probe.load_state_dict(load_checkpoint(checkpoint)["alg"]["probe"])
        columns = runner.data.aux_columns.tolist()
        if columns[:2] == [CUBE_XY.start, CUBE_XY.stop - 1]:
            with torch.no_grad():
                tokens = policy.conditioning(policy.normalize_inputs(obs))
                guess = probe.normalizer.unnormalize(probe(tokens))[:, :2]
            out["probe_cube_error_at_reset_m"] = float((guess - obs["policy"][:, CUBE_XY]).norm(dim=-1).median())
    n = episodes
    grasped, lifted = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    close_error = torch.full((n,), float("nan"))
    was_open = torch.ones(n, dtype=torch.bool)

    def track(dones: torch.Tensor, extras: dict, active: torch.Tensor) -> None:
        closing = (task.last_action[:, -1] <= 0).cpu()
        first_close = active & closing & was_open & close_error.isnan()
        close_error[first_close] = (task.cube_pos - task.grasp_point)[:, :2].norm(dim=-1).cpu()[first_close]
        was_open.copy_(~closing)
        grasped.logical_or_(active & task.grasped().cpu())
        lifted.logical_or_(active & (task.lift().cpu() > 0.02))

    result = evaluate_episodes(env, runner.inference_policy(), runner.reset_inference, runner.device, False, track)
    out.update(grasped=float(grasped.float().mean()), lifted=float(lifted.float().mean()),
               success=float(result.success.float().mean()))  # fmt: skip
    for name, mask in (("grasped", grasped & ~close_error.isnan()), ("missed", ~grasped & ~close_error.isnan())):
        if mask.any():
            out[f"first_close_xy_error_m_{name}"] = {"median": float(close_error[mask].median()),
                                                     "p90": float(close_error[mask].quantile(0.9)),
                                                     "episodes": int(mask.sum())}  # fmt: skip
    return out


def localization(dataset: Path, camera: str, steps: int, early: int, image_tokens: str, shift: int) -> dict[str, Any]:
    """Held-out cube localization error of the recipe's image encoder trained on the demonstrations' frames."""
    from rslkit.data.lerobot_reader import read_lerobot_dataset
    from rslkit.data.vla_dataset import random_shift
    from rslkit.models.vla.tokens import ImageTokenizer, KeypointTokenizer
    from rslkit.recipes import build_env

    torch.manual_seed(0)
    demos = read_lerobot_dataset(dataset, cameras=[camera])
    if demos.env_state is None:
        raise SystemExit(f"{dataset} has no observation.environment_state: record it with --env_state_group policy")
    frame = torch.cat([torch.arange(b - a) for a, b in zip(demos.episode_from.tolist(), demos.episode_to.tolist())])
    held_out = demos.episode_index >= int(0.8 * demos.num_episodes)
    train = (~held_out & (frame < early)).nonzero().squeeze(1)
    images, cube = demos.images[camera], demos.env_state[:, CUBE_XY]
    mean, std = cube[train].mean(0), cube[train].std(0)
    size = tuple(images.shape[1:3])
    if image_tokens == "keypoints":
        encoder: torch.nn.Module = KeypointTokenizer((32, 64, 128), 32, 128, size)
        tokens = 32
    else:
        encoder, tokens = ImageTokenizer((32, 64, 128), 8, 128), 64
    head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(tokens * 128, 2))
    opt = torch.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def predict(frames: torch.Tensor) -> torch.Tensor:
        return head(encoder(frames.permute(0, 3, 1, 2).float() / 255.0)) * std + mean

    t0 = time.perf_counter()
    for _ in range(steps):
        rows = train[torch.randint(len(train), (128,), generator=gen)]
        loss = ((predict(random_shift(images[rows], shift, gen)) - cube[rows]) / std).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - t0
    firsts = demos.episode_from[demos.episode_index[demos.episode_from] >= int(0.8 * demos.num_episodes)]
    env = build_env(TASK, ["--env.cameras", camera], num_envs=128, seed=EVAL_SEED)
    obs = env.get_observations()
    with torch.no_grad():
        decoded = (predict(images[firsts]) - cube[firsts]).norm(dim=-1)
        raw = (predict(obs[f"camera_{camera}"]) - obs["policy"][:, CUBE_XY]).norm(dim=-1)
        spread = (obs["policy"][:, CUBE_XY] - mean).norm(dim=-1)
    return {"dataset": str(dataset), "camera": camera, "image_tokens": image_tokens, "steps": steps,
            "early_frames": early, "shift": shift, "train_frames": len(train), "seconds": seconds,
            "heldout_first_frames_error_m": float(decoded.median()), "raw_reset_error_m": float(raw.median()),
            "guessing_the_mean_error_m": float(spread.median())}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    roll = sub.add_parser("rollouts")
    roll.add_argument("--checkpoint", type=Path, required=True)
    roll.add_argument("--episodes", type=int, default=64)
    loc = sub.add_parser("localization")
    loc.add_argument("--dataset", type=Path, required=True)
    loc.add_argument("--camera", default="table")
    loc.add_argument("--steps", type=int, default=1000)
    loc.add_argument("--early", type=int, default=10**6, help="train on the first EARLY frames of each episode")
    loc.add_argument("--image_tokens", choices=["keypoints", "grid"], default="keypoints")
    loc.add_argument("--shift", type=int, default=4, help="random shift augmentation (pixels)")
    for p in (roll, loc):
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--out", default=None, help="results JSON (default benchmarks/results/vla_diagnostics.json)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.command == "rollouts":
        result = rollouts(args.checkpoint, args.episodes)
    else:
        result = localization(args.dataset, args.camera, args.steps, args.early, args.image_tokens, args.shift)
    result["command"] = " ".join(sys.argv[1:])
    print(json.dumps(result, indent=1), flush=True)
    path = Path(args.out or C.REPO_ROOT / "benchmarks" / "results" / "vla_diagnostics.json")
    results = json.loads(path.read_text()) if path.exists() else {"runs": []}
    results["machine"] = C.machine_info(["torch", "mujoco"])
    results["runs"].append(result)
    path.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
