"""Cost of one ReinFlow training iteration against a K=10 noisy denoising chain (DPPO style), by K and env count.

The per-iteration comparison of ``reinflow_pendulum.py`` (64 envs) is dominated by fixed per-step overhead; this
script measures where the chain dominates too. Every method runs the same fine-tuning loop on ``pendulum`` (flow
policy: 4-action chunks, 64-wide residual MLP with 2 blocks; critic 64-64; 25 decisions per env; 5 epochs x 4
mini-batches); only the chain differs:

    reinflow-K1/K2/K4   K Euler steps, learned bounded noise (ReinFlow)
    chain-K10           K = 10 steps, fixed sigma 0.1 at every step (a DPPO-style noisy chain)

All start from one behaviour-cloned checkpoint (``reinflow_pendulum.pretrain``: 10 x 100 updates on noisy scripted
demonstrations). Methods alternate within each round, so the
shared machine's load hits all alike; the figure to read is the CPU time per iteration (robust to other jobs) and
its ratio to chain-K10.

    .venv/bin/python benchmarks/reinflow_iteration_cost.py --envs 64 1024 --iterations 4 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

METHODS = {
    "reinflow-K1": {"num_inference_steps": 1, "noise": "learned", "sigma_min": 0.10, "sigma_max": 0.24},
    "reinflow-K2": {"num_inference_steps": 2, "noise": "learned", "sigma_min": 0.10, "sigma_max": 0.24},
    "reinflow-K4": {"num_inference_steps": 4, "noise": "learned", "sigma_min": 0.10, "sigma_max": 0.24},
    "chain-K10": {"num_inference_steps": 10, "noise": "fixed", "sigma_max": 0.10, "clip_param": 0.01},
}


def iteration_cost(method: str, num_envs: int, iterations: int, pretrained: str) -> dict[str, float]:
    """Median wall and CPU seconds of one training iteration (the first, which warms up, is left out)."""
    import torch

    from rslkit.algorithms.reinflow import ReinFlowCfg
    from rslkit.envs import make_env
    from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg

    torch.manual_seed(0)
    cfg = ReinFlowRunnerCfg(
        pretrained=pretrained,
        algorithm=ReinFlowCfg(gamma=0.95, reward_scale=0.1, critic_hidden_dims=(64, 64), **METHODS[method]),
        num_steps_per_env=25,
        max_iterations=iterations + 1,
        eval_interval=0,
        save_interval=10**9,
        logger=(),
    )
    runner = ReinFlowRunner(make_env("pendulum", num_envs=num_envs, seed=1), cfg, None)
    runner.learn(1)
    wall, cpu = [], []
    for _ in range(iterations):
        w0, c0 = time.perf_counter(), time.process_time()
        runner.learn(1)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--iterations", type=int, default=4, help="timed iterations per run (after one warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds over the methods")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--out", default="benchmarks/results/reinflow_iteration_cost.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from reinflow_pendulum import pretrain

    tmp = tempfile.TemporaryDirectory()
    pretrained, bc_return, _ = pretrain(0, Path(tmp.name))
    print(f"behaviour-cloned start: return {bc_return:.1f}", flush=True)
    runs: list[dict] = []
    for num_envs in args.envs:
        for r in range(args.rounds):
            order = list(METHODS) if r % 2 == 0 else list(reversed(METHODS))
            for method in order:
                res = iteration_cost(method, num_envs, args.iterations, pretrained)
                runs.append({"method": method, "num_envs": num_envs, "round": r, **res})
                print(
                    f"{num_envs:5d} envs  {method:12s} wall {res['wall_s']:.3f} s  cpu {res['cpu_s']:.3f} s", flush=True
                )
    summary = {}
    for num_envs in args.envs:
        cpu = {
            m: statistics.median(x["cpu_s"] for x in runs if x["method"] == m and x["num_envs"] == num_envs)
            for m in METHODS
        }
        summary[str(num_envs)] = {
            m: {"cpu_s": cpu[m], "speedup_vs_chain_K10": cpu["chain-K10"] / cpu[m]} for m in METHODS
        }
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(
        json.dumps({"meta": C.machine_info(["torch"]), "args": vars(args), "runs": runs, "summary": summary}, indent=1)
    )


if __name__ == "__main__":
    main()
