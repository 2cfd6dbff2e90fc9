"""``python play.py --task <name> --checkpoint PATH``: evaluate a trained policy."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rslkit.cli.common import make_parser, resolve_device, run_cli
from rslkit.envs.registry import get_task
from rslkit.runners.registry import get_runner
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.config import apply_overrides, from_dict


def evaluate(runner, env, episodes: int, max_steps: int | None = None) -> dict[str, float]:
    """Run the deterministic policy until every env finished one episode; stats over the first ``episodes``.

    Returns:
        Mean and std of return and length, and the success rate where the task reports success.
    """
    policy = runner.inference_policy()
    n = env.num_envs
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    success = torch.zeros(n, device=env.device)
    has_success = False
    obs = env.get_observations()
    limit = max_steps or int(torch.as_tensor(env.max_episode_length).max()) + 1
    with torch.inference_mode():
        for _ in range(limit):
            obs, rewards, dones, extras = env.step(policy(obs.to(runner.device)).to(env.device))
            runner.reset_inference(dones.to(runner.device))
            active = ~finished
            returns += rewards * active
            lengths += active.float()
            ended = dones.bool() & active
            if "success" in extras:
                has_success = True
                success[ended] = extras["success"][ended].float()
            finished |= ended
            if bool(finished.all()):
                break
    ids = finished.nonzero().squeeze(-1)[:episodes]
    if ids.numel() == 0:
        raise RuntimeError(f"No episode finished within {limit} steps.")
    out = {
        "episodes": float(ids.numel()),
        "return_mean": returns[ids].mean().item(),
        "return_std": returns[ids].std().item() if ids.numel() > 1 else 0.0,
        "length_mean": lengths[ids].mean().item(),
        "length_std": lengths[ids].std().item() if ids.numel() > 1 else 0.0,
    }
    if has_success:
        out["success_rate"] = success[ids].mean().item()
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Parse the command line, rebuild the env from the checkpoint's config, evaluate and print."""
    parser = make_parser("Evaluate a trained policy (deterministic actions).")
    parser.add_argument("--task", required=True)
    parser.add_argument("--checkpoint", required=True, help="model_<iter>.pt written by train.py")
    parser.add_argument("--episodes", type=int, default=100, help="number of episodes (one per parallel env)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=1_000_003, help="seed of the evaluation envs")
    args, overrides = parser.parse_known_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be >= 1")
    device = resolve_device(args.device)
    spec = get_task(args.task)
    saved = load_checkpoint(Path(args.checkpoint))
    if saved.get("task") != args.task:
        raise ValueError(
            f"Checkpoint '{args.checkpoint}' was trained on task '{saved.get('task')}', not '{args.task}'."
        )
    cfg_cls, runner_cls = get_runner(saved["algorithm"])
    env_cfg = from_dict(type(spec.env_cfg()), saved["env_cfg"])
    agent_cfg = from_dict(cfg_cls, saved["agent_cfg"])
    env_cfg.num_envs, env_cfg.seed = args.episodes, args.seed
    try:
        apply_overrides({"env": env_cfg}, overrides)
    except ValueError as err:
        parser.error(str(err))
    torch.manual_seed(args.seed)
    env = spec.make_env(env_cfg, device)
    runner = runner_cls(env, agent_cfg, None, device)
    runner.load(args.checkpoint, weights_only=True)
    stats = evaluate(runner, env, args.episodes)
    line = (
        f"{args.task}: {int(stats['episodes'])} episodes"
        f" | return {stats['return_mean']:.2f} ± {stats['return_std']:.2f}"
        f" | length {stats['length_mean']:.1f} ± {stats['length_std']:.1f}"
    )
    if "success_rate" in stats:
        line += f" | success {stats['success_rate']:.1%}"
    print(line)
    if not all(math.isfinite(v) for v in stats.values()):
        raise RuntimeError("Evaluation produced non-finite statistics.")
    return stats


if __name__ == "__main__":
    run_cli(main)
