"""ReinFlow (K=4, learned bounded noise) vs a DPPO-style noisy chain (K=10, fixed noise), pi_RL's Flow-SDE and DSRL
(noise-space SAC) on the batched pendulum, all from the same flow BC checkpoint at equal env steps.

Run (results in benchmarks/results/reinflow_pendulum[_quick].json):

    .venv/bin/python benchmarks/reinflow_pendulum.py --threads 1                 # 3 seeds x 40 iterations, ~5 min
    .venv/bin/python benchmarks/reinflow_pendulum.py --threads 1 --quick         # 1 seed x 15 iterations, ~1 min
    .venv/bin/python benchmarks/reinflow_pendulum.py --methods reinflow flow-sde dsrl   # a subset of the methods

Per seed:
  1. Imperfect demonstrations: 64 episodes of the scripted energy-based swing-up controller
     (``rslkit.envs.tasks.pendulum``) with Gaussian action noise 0.8, written as a LeRobotDataset v3.0.
  2. Behaviour cloning: a rectified-flow policy (Ta = 4, 64-wide residual MLP, 2 blocks), 1000 updates of batch
     1024, EMA weights.
  3. Fine-tuning from the same BC checkpoint, same PPO settings (gamma 0.95, reward scale 0.1, clip 0.02, actor lr
     3e-4, critic lr 1e-3, 5 epochs x 4 mini-batches, 2 critic warm-up iterations, 64 envs x 25 decisions):
       reinflow   K = 4 Euler steps, noise net with sigma in [0.10, 0.24] (ReinFlow);
       dppo-style K = 10 steps, fixed sigma 0.10 at every step (a K=10 noisy denoising chain like DPPO's, run
                  through the same code so only K, the noise and the clip differ). Its clip is 0.01: the ratio is of
                  log-probs normalized over (K + 1) Ta A scalars, so (K + 1) x clip, the trust region on the summed
                  log-ratio, stays about 0.1 for both (with clip 0.02 the K=10 chain degrades; docs/benchmarks.md,
                  section 4).
       flow-sde   K = 4, pi_RL's Flow-SDE: one random step of the chain stochastic (ODE -> SDE, noise level 0.5),
                  PPO on that step's log-probability, the same PPO settings as reinflow.
       dsrl       K = 4, the BC policy frozen; SAC (the pendulum SAC recipe, gamma 0.95^4 per decision) over its
                  initial noise, latent scale 1.5, 64 envs x 25 decisions per iteration: the same env steps per
                  iteration as the PPO methods (25 SAC updates of batch 1024 per iteration).
  4. Deterministic evaluation (noise-free ODE at the fine-tuned K) of one episode on each of 256 start states that
     are identical for BC and both fine-tuned policies.

Reported: BC return (K=4, as cloned), BC return at the method's K (its starting point), fine-tuned return, net
growth (fine-tuned - BC at K=4), and the median wall-clock per training
iteration (rollout + update, evaluations excluded). Both methods run in the same process, their order alternating
from seed to seed, so the shared machine's load drift hits both alike; the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

METHODS = {
    "reinflow": {"num_inference_steps": 4, "noise": "learned", "sigma_min": 0.10, "sigma_max": 0.24},
    "dppo-style": {"num_inference_steps": 10, "noise": "fixed", "sigma_max": 0.10, "clip_param": 0.01},
    "flow-sde": {"num_inference_steps": 4, "noise_method": "flow_sde", "noise_level": 0.5},
    "dsrl": {"num_inference_steps": 4, "latent_scale": 1.5},
}
PPO = {
    "gamma": 0.95,
    "reward_scale": 0.1,
    "critic_hidden_dims": (64, 64),
    "actor_lr": 3e-4,
    "critic_lr": 1e-3,
    "clip_param": 0.02,
}


def _evaluate(runner: Any) -> float:
    import torch

    from rslkit.envs import make_env
    from rslkit.runners.evaluation import evaluate_episodes

    env = make_env("pendulum", num_envs=256, seed=123)
    torch.manual_seed(5)
    return float(evaluate_episodes(env, runner.inference_policy(), runner.reset_inference).returns.mean())


def pretrain(seed: int, root: Path) -> tuple[str, float, float]:
    """Record demos, clone them; returns (checkpoint, BC return, seconds)."""
    import torch

    from rslkit.algorithms.flow_bc import FlowBCCfg
    from rslkit.data import record_episodes, write_lerobot_dataset
    from rslkit.envs import make_env
    from rslkit.envs.tasks.pendulum import pendulum_expert
    from rslkit.models.flow import FlowPolicyCfg
    from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
    from rslkit.runners.pretrain_runner import PretrainRunner

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    demos = record_episodes(make_env("pendulum", num_envs=64, seed=seed), pendulum_expert, 64, action_noise=0.8)
    write_lerobot_dataset(root / "demos", demos, fps=20)
    cfg = FlowBCRunnerCfg(
        dataset=str(root / "demos"),
        algorithm=FlowBCCfg(learning_rate=2e-3, batch_size=1024),
        policy=FlowPolicyCfg(horizon=4, num_inference_steps=4, hidden_dim=64, num_blocks=2),
        max_iterations=10,
        updates_per_iteration=100,
        eval_interval=0,
        logger=(),
    )
    bc = PretrainRunner(make_env("pendulum", num_envs=64, seed=seed + 1), cfg, root / "bc")
    bc.learn()
    seconds = time.perf_counter() - t0
    return str(root / "bc" / "model_10.pt"), _evaluate(bc), seconds


def finetune(method: str, checkpoint: str, seed: int, iterations: int, log_dir: Path) -> dict[str, float]:
    """Fine-tune the BC checkpoint with one method; returns its figures."""
    import csv

    import torch

    from rslkit.algorithms.reinflow import ReinFlowCfg
    from rslkit.envs import make_env
    from rslkit.recipes.sac_defaults import small_task_sac_cfg
    from rslkit.runners.dsrl_runner import DSRLRunner, dsrl_cfg
    from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg

    torch.manual_seed(seed)
    env = make_env("pendulum", num_envs=64, seed=seed + 2)
    common: dict[str, Any] = dict(pretrained=checkpoint, num_steps_per_env=25, max_iterations=iterations,
                                  save_interval=10**9, logger=())  # fmt: skip
    runner: Any
    if method == "dsrl":
        settings = METHODS[method]
        cfg = dsrl_cfg(small_task_sac_cfg(), 4, latent_scale=settings["latent_scale"], **common)
        runner = DSRLRunner(env, cfg, log_dir)
    else:
        rf = ReinFlowRunnerCfg(algorithm=ReinFlowCfg(**{**PPO, **METHODS[method]}), eval_interval=0, **common)
        runner = ReinFlowRunner(env, rf, log_dir)
    start_return = _evaluate(runner)  # the pretrained policy run at this method's K
    runner.learn()
    with (log_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    # the off-policy runner (dsrl) logs no iteration time: its rollout and update times are all it spends
    times = [float(row.get("Perf/iteration_time") or float(row["Perf/collect_time"]) + float(row["Perf/learn_time"]))
             for row in rows]  # fmt: skip
    return {
        "return": _evaluate(runner),
        "bc_return_at_k": start_return,
        "s_per_iteration": statistics.median(times),
        "collect_s": statistics.median(float(row["Perf/collect_time"]) for row in rows),
        "update_s": statistics.median(float(row["Perf/learn_time"]) for row in rows),
        "train_s": sum(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="1 seed x 15 iterations")
    parser.add_argument("--out", default=None, help="results JSON path")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.iterations = 1, 15
    import torch

    torch.set_num_threads(args.threads)
    info = C.machine_info(["rslkit", "torch", "pyarrow"])
    C.print_machine_info(info)
    t_start = time.perf_counter()
    runs = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory(prefix="reinflow_bench_") as tmp:
            checkpoint, bc_return, bc_s = pretrain(seed, Path(tmp))
            order = list(args.methods) if seed % 2 == 0 else list(reversed(args.methods))
            for method in order:
                out = finetune(method, checkpoint, seed, args.iterations, Path(tmp) / method)
                runs.append({"seed": seed, "method": method, "bc_return": bc_return, "bc_s": bc_s, **out})
                print(
                    f"seed {seed} {method:>10s}: BC {bc_return:8.1f} -> {out['return']:8.1f} "
                    f"({out['s_per_iteration']:.2f} s/it)",
                    flush=True,
                )
    rows, summary = [], {}
    for method in args.methods:
        mine = [r for r in runs if r["method"] == method]
        growth = [r["return"] - r["bc_return"] for r in mine]
        summary[method] = {
            "bc_return": statistics.mean(r["bc_return"] for r in mine),
            "bc_return_at_k": statistics.mean(r["bc_return_at_k"] for r in mine),
            "finetuned_return": statistics.mean(r["return"] for r in mine),
            "net_growth": statistics.mean(growth),
            "net_growth_min": min(growth),
            "s_per_iteration": statistics.median(r["s_per_iteration"] for r in mine),
            "collect_s": statistics.median(r["collect_s"] for r in mine),
            "update_s": statistics.median(r["update_s"] for r in mine),
            "K": METHODS[method]["num_inference_steps"],
        }
        s = summary[method]
        rows.append(
            [
                method,
                s["K"],
                C.fmt(s["bc_return"]),
                C.fmt(s["bc_return_at_k"]),
                C.fmt(s["finetuned_return"]),
                C.fmt(s["net_growth"]),
                C.fmt(s["net_growth_min"]),
                C.fmt(s["s_per_iteration"], ".2f"),
                C.fmt(s["collect_s"], ".2f"),
                C.fmt(s["update_s"], ".2f"),
            ]
        )
    print()
    C.print_table(
        [
            "method",
            "K",
            "BC (K=4)",
            "BC at K",
            "fine-tuned",
            "net growth",
            "min growth",
            "s/iteration",
            "rollout s",
            "update s",
        ],
        rows,
    )
    ratio = None
    if "dppo-style" in summary and "reinflow" in summary:
        ratio = summary["dppo-style"]["s_per_iteration"] / summary["reinflow"]["s_per_iteration"]
        print(f"\nwall-clock per iteration: dppo-style K=10 / reinflow K=4 = {ratio:.2f}x")
    info["total_wall_s"] = time.perf_counter() - t_start
    info["run_threads"] = args.threads
    name = "reinflow_pendulum_quick" if args.quick else "reinflow_pendulum"
    if set(args.methods) != set(METHODS):
        name += "_" + "_".join(m.replace("-", "") for m in args.methods)
    payload = {
        "benchmark": "reinflow_pendulum",
        "machine": info,
        "args": vars(args),
        "summary": summary,
        "time_ratio_dppo_over_reinflow": ratio,
        "runs": runs,
    }
    print(f"results: {C.write_results(name, payload, args.out)}")


if __name__ == "__main__":
    main()
