"""VLA pick-and-place on ``so101-pick-place``: success per instruction after BC from scripted demonstrations and
after ReinFlow fine-tuning, the wall-clock of each stage, the exported model's chunk latency and rendering frames/s.

    .venv/bin/python benchmarks/vla_pick_place.py --workdir /tmp/vla --bc_iterations 70 --rl_iterations 20

Each stage runs the command a user types, as a child process, and is timed; a stage whose output is already in
``--workdir`` is skipped (its earlier figures are kept), so a stopped benchmark continues where it stopped:

  record    ``python -m rslkit.record --task so101-pick-place --expert --episodes 200 --num_envs 16 --obs_group
            proprio --env.cameras table --camera table --env_state_group policy --out WORKDIR/pick_place``: the
            scripted expert, one of the four instructions per episode, the table camera at 64x64 as an AV1 video
            and the privileged state as ``observation.environment_state`` (the target of BC's auxiliary probe; the
            recipe's ``--agent.aux_state policy``; ``--record_env_state ''`` leaves it out) (LeRobotDataset v3);
            ``--cameras front wrist`` records (and trains on) other cameras; ``--record_noise 0.05 --record_label
            policy`` executes the expert with action noise and stores its clean actions (DART demonstrations).
  bc        ``train.py --task so101-pick-place --algo vla-bc --dataset WORKDIR/pick_place --num_envs 32
            --max_iterations N``: the task's VLA recipe (table camera as keypoint tokens, MiniLM instruction,
            proprio state, chunks of 16, 100 updates per iteration, the cube probe), evaluated on 32 envs every 10
            iterations; ``--stages bc -- --agent.aux_state= --agent.policy.image_tokens grid`` is the earlier
            recipe (grid tokens, no probe).
  reinflow  ``train.py --task so101-pick-place --algo vla-reinflow --checkpoint <bc run>/model_N.pt --num_envs 32
            --max_iterations M``: the task's ReinFlow recipe (the action expert alone, small exploration noise, a
            critic on the privileged state), evaluated on 32 envs every 5 iterations.
  eval      every checkpoint named by ``--eval`` (default: the last BC and the last ReinFlow one):
            ``--eval_episodes`` deterministic episodes from fixed start states (seed ``EVAL_SEED``), success overall
            and per instruction; ``--eval_execute_steps 0 8`` evaluates each with the whole chunk and with 8 of
            its actions executed before replanning (receding horizon, ``--agent.execute_steps``);
            ``--eval_ensemble_coeff 0.01`` adds one with ACT's temporal ensembling
            (``--agent.temporal_ensemble_coeff``).
  latency   the last checkpoint exported to ONNX (``python -m rslkit.export``): batch-1 chunk latency with ONNX
            Runtime on one thread (median, p99) and its largest difference from torch.
  render    env steps/s with the cameras at 64x64 (``--env.cameras table``) on 1 and 32 envs.

Everything after ``--`` is passed to the training stages run in that call (``bc``, ``reinflow``); flags of one stage
only go with ``--stages`` naming it.

Results: benchmarks/results/vla_pick_place.json (``--out``), rewritten after every stage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

TASK = "so101-pick-place"
EVAL_SEED = 20_000
PYTHON = sys.executable


def timed(cmd: list[str], log: Path) -> float:
    """Run ``cmd`` from the repository root with stdout and stderr in ``log``; its wall-clock in seconds."""
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    with log.open("w") as f:
        code = subprocess.run(cmd, cwd=C.REPO_ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"{cmd[1]} failed with exit code {code}; see {log}")
    return time.perf_counter() - t0


def last_checkpoint(run_root: Path) -> Path:
    """The newest ``model_<i>.pt`` of the single run directory under ``run_root``."""
    ckpts = sorted(run_root.rglob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not ckpts:
        raise SystemExit(f"No model_<i>.pt under {run_root}")
    return ckpts[-1]


def eval_curve(run_root: Path) -> list[dict[str, float]]:
    """The run's in-training evaluations (``metrics.csv`` rows with ``Eval/success_rate``)."""
    import csv

    rows: list[dict[str, float]] = []
    for path in run_root.rglob("metrics.csv"):
        with path.open() as f:
            for row in csv.DictReader(f):
                if row.get("Eval/success_rate"):
                    keep = {k: float(v) for k, v in row.items() if v and (k == "iteration" or k.startswith("Eval/"))}
                    rows.append(keep)
    return sorted(rows, key=lambda r: r["iteration"])


# ------------------------------------------------------------------ stages
def stage_record(args: argparse.Namespace, dataset: Path) -> dict[str, Any]:
    """The scripted expert's demonstrations into ``dataset``, timed."""
    cams = [arg for cam in args.cameras for arg in ("--camera", cam)]
    cmd = [PYTHON, "-m", "rslkit.record", "--task", TASK, "--expert", "--episodes", str(args.episodes),
           "--num_envs", "16", "--obs_group", "proprio", "--env.cameras", ",".join(args.cameras), *cams,
           "--action_noise", str(args.record_noise), "--label", args.record_label, "--out", str(dataset)]  # fmt: skip
    if args.record_env_state:
        cmd += ["--env_state_group", args.record_env_state]
    seconds = timed(cmd, args.workdir / "record.log")
    return {"command": " ".join(cmd[1:]), "seconds": seconds}


def camera_args(cameras: list[str]) -> list[str]:
    """``train.py`` arguments that render ``cameras`` and feed them to the VLA policy (the recipe's: table)."""
    return ["--env.cameras", ",".join(cameras), "--agent.policy.cameras", ",".join(cameras)]


def stage_train(args: argparse.Namespace, name: str, extra: list[str], iterations: int) -> dict[str, Any]:
    """``train.py`` on the task into ``WORKDIR/<name>`` (a checkpoint every 10 iterations), timed."""
    cmd = [PYTHON, "train.py", "--task", TASK, "--num_envs", str(args.num_envs), "--max_iterations", str(iterations),
           "--logdir", str(args.workdir / name), "--threads", str(args.threads), "--seed", str(args.seed),
           "--agent.save_interval", "10", *camera_args(args.cameras), *extra]  # fmt: skip
    seconds = timed(cmd, args.workdir / f"{name}.log")
    return {"command": " ".join(cmd[1:]), "seconds": seconds, "checkpoint": str(last_checkpoint(args.workdir / name))}


def evaluate_checkpoint(
    ckpt: Path, episodes: int, execute_steps: int = 0, ensemble_coeff: float | None = None
) -> dict[str, Any]:
    """Success overall and per instruction of ``episodes`` deterministic episodes of the checkpoint's policy,
    executing ``execute_steps`` actions of each chunk (0: all of them), or with temporal ensembling at
    ``ensemble_coeff``."""
    import torch

    from rslkit.recipes.run import load_run
    from rslkit.runners.evaluation import evaluate_episodes

    t0 = time.perf_counter()
    overrides = ["--agent.execute_steps", str(execute_steps), "--agent.temporal_ensemble_coeff", str(ensemble_coeff)]
    env, runner, _ = load_run(ckpt, num_envs=episodes, seed=EVAL_SEED, overrides=overrides)
    result = evaluate_episodes(env, runner.inference_policy(), runner.reset_inference, runner.device)
    per: dict[str, dict[str, float]] = {}
    for g, text in enumerate(env.instructions):
        mask = result.goal == g
        per[text] = {"episodes": int(mask.sum()), "success": float(result.success[mask].float().mean())}
    return {
        "checkpoint": str(ckpt),
        "episodes": episodes,
        "execute_steps": execute_steps,
        "temporal_ensemble_coeff": ensemble_coeff,
        "success": float(result.success.float().mean()),
        "per_instruction": per,
        "mean_episode_length": float(result.lengths.mean()),
        "seconds": time.perf_counter() - t0,
        "threads": torch.get_num_threads(),
    }


def latency(ckpt: Path, workdir: Path, iters: int) -> dict[str, Any]:
    """Export ``ckpt`` and time batch-1 chunk inference with ONNX Runtime (one thread); parity with torch."""
    import numpy as np
    import torch

    from rslkit.deploy.onnx_policy import OnnxPolicy
    from rslkit.recipes.run import load_run

    onnx_path = workdir / "vla.onnx"
    cmd = [PYTHON, "-m", "rslkit.export", "--checkpoint", str(ckpt), "--out", str(onnx_path)]
    export_seconds = timed(cmd, workdir / "export.log")
    env, runner, _ = load_run(ckpt, num_envs=1, seed=EVAL_SEED)
    onnx = OnnxPolicy(onnx_path, intra_op_threads=1)
    obs = env.get_observations()
    text = env.instructions[int(obs["goal"].reshape(-1)[0])]
    inputs: dict[str, Any] = {g: obs[g].cpu().numpy() for g in onnx.obs_groups if g != "instruction"}
    inputs["instruction"] = text
    noise = np.random.default_rng(0).standard_normal((1, onnx.chunk_length, onnx.action_dim)).astype(np.float32)
    for _ in range(20):
        onnx(inputs, noise)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        onnx(inputs, noise)
        times.append(time.perf_counter() - t)
    torch_obs = {g: torch.from_numpy(v) for g, v in inputs.items() if g != "instruction"}
    torch_obs["instruction"] = torch.from_numpy(onnx.instruction_embedding(text)).reshape(1, -1)
    with torch.inference_mode():
        torch_chunk = runner.policy.act_chunk(torch_obs, torch.from_numpy(noise))
    diff = float(np.abs(onnx(inputs, noise) - torch_chunk.numpy()).max())
    ms = np.array(times) * 1e3
    return {"command": " ".join(cmd[1:]), "export_seconds": export_seconds, "median_ms": float(np.median(ms)),
            "p99_ms": float(np.percentile(ms, 99)), "max_abs_diff_vs_torch": diff, "iters": iters}  # fmt: skip


def render_fps(num_envs: int, steps: int, cameras: list[str]) -> float:
    """Env steps x envs per second with ``cameras`` on, zero actions (rendering dominates)."""
    import torch

    from rslkit.recipes import build_env

    env = build_env(TASK, ["--env.cameras", ",".join(cameras)], num_envs=num_envs, seed=0)
    actions = torch.zeros(num_envs, env.num_actions)
    env.step(actions)
    t0 = time.perf_counter()
    for _ in range(steps):
        env.step(actions)
    return steps * num_envs / (time.perf_counter() - t0)


# ------------------------------------------------------------------ driver
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=C.TRAIN_FLAGS_HELP)
    parser.add_argument("--workdir", type=Path, required=True, help="datasets, runs and logs (reused when rerun)")
    parser.add_argument("--stages", nargs="+", default=["record", "bc", "reinflow", "eval", "latency", "render"])
    parser.add_argument("--episodes", type=int, default=200, help="scripted demonstrations")
    parser.add_argument("--record_noise", type=float, default=0.0, help="std of the expert's action noise")
    parser.add_argument(
        "--record_label", choices=["executed", "policy"], default="executed", help="recorded action (DART: policy)"
    )
    parser.add_argument(
        "--record_env_state",
        default="policy",
        help="also record this observation group as observation.environment_state (policy: the privileged state, "
        "the target of the recipe's BC probe); '': none (then run the bc stage with -- --agent.aux_state=)",
    )
    parser.add_argument("--bc_iterations", type=int, default=70)
    parser.add_argument("--rl_iterations", type=int, default=20)
    parser.add_argument("--num_envs", type=int, default=32, help="envs of training and in-training evaluation")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every stage")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval", nargs="*", type=Path, default=None, help="checkpoints to evaluate")
    parser.add_argument("--eval_episodes", type=int, default=256)
    parser.add_argument(
        "--eval_execute_steps",
        nargs="+",
        type=int,
        default=[0],
        help="actions executed per chunk in evaluation, one evaluation each (0: the whole chunk)",
    )
    parser.add_argument(
        "--eval_ensemble_coeff",
        nargs="*",
        type=float,
        default=[],
        help="evaluations with temporal ensembling (ACT) at these coefficients, one each (after --eval_execute_steps)",
    )
    parser.add_argument("--latency_iters", type=int, default=500)
    parser.add_argument("--cameras", nargs="+", default=["table"], help="cameras recorded and seen by the policy")
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/vla_pick_place.json)")
    own, train_flags = C.split_train_flags()
    args = parser.parse_args(own)
    import torch

    torch.set_num_threads(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    state_path = args.workdir / "results.json"
    results: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
    results["machine"] = C.machine_info(["torch", "mujoco", "onnxruntime", "transformers", "av"])
    C.print_machine_info(results["machine"])

    def save() -> None:
        state_path.write_text(json.dumps(results, indent=2))
        C.write_results("vla_pick_place", results, args.out)

    dataset = args.workdir / "pick_place"
    if "record" in args.stages and not (dataset / "meta" / "info.json").exists():
        results["record"] = stage_record(args, dataset)
        save()
    if "bc" in args.stages and not list((args.workdir / "bc").rglob(f"model_{args.bc_iterations}.pt")):
        extra = ["--algo", "vla-bc", "--dataset", str(dataset), *train_flags]
        results["bc"] = stage_train(args, "bc", extra, args.bc_iterations)
        save()
    if "bc" in results:
        results["bc"]["curve"] = eval_curve(args.workdir / "bc")
    if "reinflow" in args.stages and not list((args.workdir / "reinflow").rglob("model_*.pt")):
        bc_ckpt = last_checkpoint(args.workdir / "bc")
        extra = ["--algo", "vla-reinflow", "--checkpoint", str(bc_ckpt), *train_flags]
        results["reinflow"] = stage_train(args, "reinflow", extra, args.rl_iterations)
        save()
    if "reinflow" in results:
        results["reinflow"]["curve"] = eval_curve(args.workdir / "reinflow")
    if "eval" in args.stages:
        ckpts = args.eval
        if ckpts is None:
            ckpts = [last_checkpoint(args.workdir / s) for s in ("bc", "reinflow") if (args.workdir / s).exists()]
        evals = results.setdefault("eval", {})
        settings = [(n, None) for n in args.eval_execute_steps] + [(0, c) for c in args.eval_ensemble_coeff]
        for ckpt in ckpts:
            for n, coeff in settings:
                key = str(ckpt) if n == 0 else f"{ckpt} execute_steps={n}"
                key = key if coeff is None else f"{ckpt} temporal_ensemble_coeff={coeff}"
                if key not in evals:
                    evals[key] = evaluate_checkpoint(ckpt, args.eval_episodes, n, coeff)
                    print(json.dumps(evals[key], indent=1), flush=True)
                    save()
    if "latency" in args.stages:
        stage = "reinflow" if (args.workdir / "reinflow").exists() else "bc"
        results["latency"] = latency(last_checkpoint(args.workdir / stage), args.workdir, args.latency_iters)
        print(json.dumps(results["latency"]), flush=True)
        save()
    if "render" in args.stages:
        results["render_steps_per_s"] = {str(n): render_fps(n, 200 if n == 1 else 50, args.cameras) for n in (1, 32)}
        print(json.dumps(results["render_steps_per_s"]), flush=True)
    save()


if __name__ == "__main__":
    main()
