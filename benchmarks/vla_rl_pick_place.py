"""RL that lifts a VLA on ``so101-pick-place`` (issue 45, benchmark 1): Flow-Noise (ReinFlow), Flow-SDE and DSRL from
one behaviour-cloning checkpoint that evaluates between 30 % and 75 %, at equal env steps, 256 deterministic episodes.

    .venv/bin/python benchmarks/vla_rl_pick_place.py --workdir /tmp/vla_rl --seeds 0 1

Stages (each a child process running the command a user types, timed; a stage whose output is in ``--workdir`` is
skipped, so a stopped benchmark continues where it stopped):

  record, bc  as ``benchmarks/vla_pick_place.py`` (the scripted expert's 200 demonstrations with the table camera;
              ``train.py --algo vla-bc``, a checkpoint every 10 iterations up to ``--bc_iterations``).
  start       the BC checkpoints from ``--start_from`` on (default 30) are evaluated on ``--eval_episodes`` (256)
              deterministic episodes from fixed start states until one succeeds in ``[--start_min, --start_max]``
              (0.30, 0.75): the start of every method. ``--start_checkpoint PATH`` names it by hand.
  methods     per seed (``--seeds``) and method (``--methods``), ``--rl_iterations`` iterations on ``--num_envs``
              envs, the same env steps per iteration (``num_steps_per_env`` decisions of 16 steps per env):
                flow-noise  ``train.py --algo vla-reinflow --pretrained START``: the task's ReinFlow recipe (action
                            expert only, learned noise sigma in [0.02, 0.08], W2 pull, asymmetric critic);
                flow-sde    the same with ``--agent.algorithm.noise_method flow_sde --agent.algorithm.noise_level
                            A`` (``--sde_noise_level``, 0.5: pi_RL's);
                dsrl        ``train.py --algo dsrl --pretrained START``: the task's DSRL recipe (the VLA frozen, SAC
                            over its initial noise, actor and critics on the simulator's ``policy`` state group).
  eval        the last checkpoint of every run: success overall and per instruction on the same 256 episodes.

Reported per method and seed: success (overall, per instruction) against the start, env steps, wall-clock of
training, and whether the issue's goal holds: the best method +15 points or more over the start with both seeds
above it. Results: benchmarks/results/vla_rl_pick_place.json (``--out``), rewritten after every stage.
Everything after ``--`` goes to every training stage of that call.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import vla_pick_place as V  # noqa: E402

METHODS = {
    "flow-noise": ["--algo", "vla-reinflow"],
    "flow-sde": ["--algo", "vla-reinflow", "--agent.algorithm.noise_method", "flow_sde"],
    "dsrl": ["--algo", "dsrl"],
}
DECISIONS = 10
"""Decisions per env and iteration of every method (the vla-reinflow recipe's ``num_steps_per_env``)."""


def pick_start(args: argparse.Namespace, results: dict[str, Any], save: Any) -> Path:
    """The first BC checkpoint from ``--start_from`` on whose success lies in the start window (or
    ``--start_checkpoint``); every evaluation is kept in ``results["start_candidates"]``."""
    if args.start_checkpoint:
        return Path(args.start_checkpoint)
    tried = results.setdefault("start_candidates", {})
    ckpts = sorted((args.workdir / "bc").rglob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    for ckpt in ckpts:
        if int(ckpt.stem.split("_")[1]) < args.start_from:
            continue
        if str(ckpt) not in tried:
            tried[str(ckpt)] = V.evaluate_checkpoint(ckpt, args.eval_episodes)
            save()
        success = tried[str(ckpt)]["success"]
        print(f"start candidate {ckpt.name}: success {success:.3f}", flush=True)
        if args.start_min <= success <= args.start_max:
            return ckpt
    raise SystemExit(
        f"No BC checkpoint from iteration {args.start_from} on succeeds in [{args.start_min}, {args.start_max}] "
        f"(tried {len(tried)}); train more or fewer BC iterations, or pass --start_checkpoint."
    )


def train(args: argparse.Namespace, name: str, seed: int, extra: list[str]) -> dict[str, Any]:
    """``train.py`` of one method and seed into ``WORKDIR/<name>`` with the table camera, timed; its figures."""
    cmd = [V.PYTHON, "train.py", "--task", V.TASK, "--num_envs", str(args.num_envs), "--max_iterations",
           str(args.rl_iterations), "--logdir", str(args.workdir / name), "--threads", str(args.threads), "--seed",
           str(seed), "--agent.save_interval", "10", "--env.cameras", "table", *extra]  # fmt: skip
    seconds = V.timed(cmd, args.workdir / f"{name.replace('/', '_')}.log")
    root = args.workdir / name
    return {"command": " ".join(cmd[1:]), "seconds": seconds, "checkpoint": str(V.last_checkpoint(root)),
            "env_steps": env_steps(root)}  # fmt: skip


def env_steps(run_root: Path) -> int:
    """The run's ``Perf/total_env_steps`` in its last ``metrics.csv`` row."""
    rows: list[dict[str, str]] = []
    for path in run_root.rglob("metrics.csv"):
        with path.open() as f:
            rows += list(csv.DictReader(f))
    return int(float(rows[-1]["Perf/total_env_steps"])) if rows else 0


def goal(start: float, evals: dict[str, dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    """Per method the mean gain over the start (points) and whether every seed is above it; the issue's goal: the
    best method gains 15 points or more with every seed above the start."""
    per: dict[str, Any] = {}
    for method in METHODS:
        runs = [evals[f"{method}/seed{s}"]["success"] for s in seeds if f"{method}/seed{s}" in evals]
        if runs:
            per[method] = {"gain_points": 100 * (sum(runs) / len(runs) - start), "all_seeds_above": min(runs) > start}
    best = max(per, key=lambda m: per[m]["gain_points"], default=None)
    met = best is not None and per[best]["gain_points"] >= 15 and per[best]["all_seeds_above"]
    return {"per_method": per, "best": best, "goal_met": met}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=C.TRAIN_FLAGS_HELP)
    parser.add_argument("--workdir", type=Path, required=True, help="datasets, runs and logs (reused when rerun)")
    parser.add_argument("--stages", nargs="+", default=["record", "bc", "start", "methods", "eval"])
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--episodes", type=int, default=200, help="scripted demonstrations")
    parser.add_argument("--bc_iterations", type=int, default=70)
    parser.add_argument("--start_from", type=int, default=30, help="first BC iteration tried as the start")
    parser.add_argument("--start_min", type=float, default=0.30)
    parser.add_argument("--start_max", type=float, default=0.75)
    parser.add_argument("--start_checkpoint", default="", help="the BC start, chosen by hand")
    parser.add_argument("--rl_iterations", type=int, default=20)
    parser.add_argument("--sde_noise_level", type=float, default=0.5)
    parser.add_argument("--num_envs", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every stage")
    parser.add_argument("--eval_episodes", type=int, default=256)
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/vla_rl_pick_place.json)")
    own, train_flags = C.split_train_flags()
    args = parser.parse_args(own)
    # what vla_pick_place's record and bc stages read
    args.cameras, args.record_noise, args.record_label, args.record_env_state = ["table"], 0.0, "executed", "policy"
    args.seed = args.seeds[0]
    args.workdir.mkdir(parents=True, exist_ok=True)
    state_path = args.workdir / "results.json"
    results: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
    results["machine"] = C.machine_info(["torch", "mujoco", "transformers"])
    results["args"] = {k: str(v) for k, v in vars(args).items()}
    C.print_machine_info(results["machine"])

    def save() -> None:
        state_path.write_text(json.dumps(results, indent=2))
        C.write_results("vla_rl_pick_place", results, args.out)

    dataset = args.workdir / "pick_place"
    if "record" in args.stages and not (dataset / "meta" / "info.json").exists():
        results["record"] = V.stage_record(args, dataset)
        save()
    if "bc" in args.stages and not list((args.workdir / "bc").rglob(f"model_{args.bc_iterations}.pt")):
        bc = ["--algo", "vla-bc", "--dataset", str(dataset), *train_flags]
        results["bc"] = V.stage_train(args, "bc", bc, args.bc_iterations)
        save()
    start = pick_start(args, results, save)
    start_eval = results.setdefault("start_candidates", {}).get(str(start)) or V.evaluate_checkpoint(
        start, args.eval_episodes
    )
    results["start"] = start_eval
    save()
    runs = results.setdefault("runs", {})
    for seed in args.seeds:
        for method in args.methods:
            name = f"{method}/seed{seed}"
            root = args.workdir / method / f"seed{seed}"
            if "methods" in args.stages and not list(root.rglob("model_*.pt")):
                extra = [*METHODS[method], "--pretrained", str(start), "--agent.num_steps_per_env", str(DECISIONS)]
                if method == "flow-sde":
                    extra += ["--agent.algorithm.noise_level", str(args.sde_noise_level)]
                runs[name] = train(args, name, seed, [*extra, *train_flags])
                save()
    evals = results.setdefault("eval", {})
    if "eval" in args.stages:
        for name in runs:
            if name not in evals:
                evals[name] = V.evaluate_checkpoint(Path(runs[name]["checkpoint"]), args.eval_episodes)
                print(f"{name}: success {evals[name]['success']:.3f} (start {start_eval['success']:.3f})", flush=True)
                save()
    results["goal"] = goal(start_eval["success"], evals, args.seeds)
    print(json.dumps(results["goal"], indent=1))
    save()


if __name__ == "__main__":
    main()
