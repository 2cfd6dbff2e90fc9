"""rslkit PPO vs rsl_rl 5.5.1 PPO: throughput, peak memory and return on the same env, network and hyperparameters.

Run (full benchmark: 3 seeds x {64-64: 20, 256-256-256: 5 iterations} x 2 libraries; results in
benchmarks/results/ppo_vs_rsl_rl.json). On a shared 2-core machine pin torch to one thread (see below):

    .venv/bin/python benchmarks/ppo_vs_rsl_rl.py --threads 1        # ~15 min on 2 busy cores
    .venv/bin/python benchmarks/ppo_vs_rsl_rl.py                    # torch's default thread count

Smoke test (about a minute):

    .venv/bin/python benchmarks/ppo_vs_rsl_rl.py --quick

What runs
    Env: rslkit's ``pendulum`` task (batched Gymnasium Pendulum-v1, 200-step episodes), 4096 envs, on CPU. rslkit
    tasks implement rsl_rl's VecEnv contract, so rsl_rl's ``OnPolicyRunner`` drives the very same env object.
    Both libraries see the env through the same thin wrapper, ``_common.EpisodeReturnRecorder``, which records the
    returns of finished complete episodes (so the return figure is computed identically for both).
    Networks: actor and critic MLPs, ELU, 64-64 and 256-256-256. Gaussian policy, state-independent std, init 1.0
    (rsl_rl: ``GaussianDistribution`` with ``std_type="log"`` by default to match rslkit's log-std parameter;
    ``--rsl-std-type scalar`` gives rsl_rl's own default). Observation normalization on for both.
    PPO: rsl_rl defaults for both - 24 steps/env, 5 epochs x 4 mini-batches, clip 0.2, gamma 0.99, lambda 0.95,
    value coef 1.0, entropy 0.01, lr 1e-3 adaptive (desired KL 0.01), max grad norm 1.0, clipped value loss,
    advantages normalized over the whole batch.
    No file logging for either (``log_dir=None``). Both use the same torch intra-op thread count: torch's default,
    or ``--threads N``. On a CPU shared with other jobs use ``--threads 1``: with more threads than free cores,
    OpenMP threads wait for descheduled peers and an iteration can take 10-20x longer, at random.

How it is measured
    For each seed and network the two libraries run back to back, each in a fresh child process, and the order
    alternates (from seed to seed and from network to network), so slow drift of the shared machine's load hits
    both alike. rslkit is imported from a snapshot of the working tree taken at the start (other people may edit
    it meanwhile); every run records the fingerprint of the code it imported. Reported per run:
      * steps/s - ``iterations * 24 * num_envs`` / wall time of ``runner.learn()`` (construction excluded);
      * steps/s of the median iteration - iterations timed by the env wrapper (from one iteration's first env step
        to the next one's), robust to load spikes from other processes;
      * steps per CPU-second - the same steps / CPU time (user + system) the process used during ``learn()``;
        with ``--threads 1`` this is the least noisy figure on a shared machine;
      * peak RSS - ``getrusage(RUSAGE_SELF).ru_maxrss`` of the child at the end (both children import torch,
        rslkit and rsl_rl, so the import footprint is identical), and its growth over the RSS measured just
        before the runner is built;
      * mean return - mean over the last ``num_envs`` finished episodes at the end of the budget (from the
        wrapper; with synchronized 200-step episodes this is the most recent round of 4096 episodes).
    Summary: per network and metric, the median over seeds per library, the ratio of the medians rslkit / rsl_rl,
    and the median of the per-seed (paired) ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

STEPS_PER_ENV = 24


# ============================================================================================== child side
def rslkit_runner(env: Any, dims: list[int], iters: int) -> Any:
    from rslkit.algorithms.ppo import PPOCfg
    from rslkit.models.actor_critic import PolicyCfg
    from rslkit.runners.on_policy_runner import OnPolicyRunner
    from rslkit.runners.ppo_config import PPORunnerCfg

    cfg = PPORunnerCfg(
        algorithm=PPOCfg(
            num_learning_epochs=5,
            num_mini_batches=4,
            clip_param=0.2,
            gamma=0.99,
            lam=0.95,
            value_loss_coef=1.0,
            entropy_coef=0.01,
            learning_rate=1e-3,
            max_grad_norm=1.0,
            use_clipped_value_loss=True,
            schedule="adaptive",
            desired_kl=0.01,
            normalize_advantage_per_mini_batch=False,
        ),
        policy=PolicyCfg(
            actor_hidden_dims=tuple(dims),
            critic_hidden_dims=tuple(dims),
            activation="elu",
            distribution="gaussian",
            state_dependent_std=False,
            init_std=1.0,
            obs_normalization=True,
        ),
        num_steps_per_env=STEPS_PER_ENV,
        max_iterations=iters,
        save_interval=10**9,
        check_for_nan=True,
        init_at_random_ep_len=False,
    )
    return OnPolicyRunner(env, cfg, log_dir=None, device="cpu")


def rsl_rl_train_cfg(dims: list[int], std_type: str) -> dict[str, Any]:
    """rsl_rl 5.5.1 runner config (dict form read by ``rsl_rl.runners.OnPolicyRunner``) with the same settings."""
    return {
        "num_steps_per_env": STEPS_PER_ENV,
        "save_interval": 10**9,
        "check_for_nan": True,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "clip_param": 0.2,
            "gamma": 0.99,
            "lam": 0.95,
            "value_loss_coef": 1.0,
            "entropy_coef": 0.01,
            "learning_rate": 1e-3,
            "max_grad_norm": 1.0,
            "optimizer": "adam",
            "use_clipped_value_loss": True,
            "schedule": "adaptive",
            "desired_kl": 0.01,
            "normalize_advantage_per_mini_batch": False,
        },
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": list(dims),
            "activation": "elu",
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": std_type},
        },
        "critic": {
            "class_name": "MLPModel",
            "hidden_dims": list(dims),
            "activation": "elu",
            "obs_normalization": True,
        },
    }


def child_main(spec: dict[str, Any], result_path: str) -> None:
    import rsl_rl  # noqa: F401  (both children import both libraries: identical import footprint)
    import rsl_rl.runners
    import torch

    import rslkit  # noqa: F401
    from rslkit.envs import make_env

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    if spec["lib"] == "rslkit" or spec.get("rsl_malloc_tuned"):
        from rslkit.utils.allocator import share_one_malloc_arena, tune_cpu_allocator

        share_one_malloc_arena()  # what train.py does first, before torch's OpenMP threads start
        if spec["lib"] == "rsl_rl":
            tune_cpu_allocator()  # what rslkit's runners do when learn() starts
    C.seed_all(spec["seed"])
    num_envs, iters, dims = spec["num_envs"], spec["iters"], spec["dims"]
    env = C.EpisodeReturnRecorder(make_env("pendulum", num_envs=num_envs, seed=spec["seed"]), num_envs, STEPS_PER_ENV)
    rss_before = C.rss_mib()

    t0 = time.perf_counter()
    if spec["lib"] == "rslkit":
        runner = rslkit_runner(env, dims, iters)
        params = sum(p.numel() for p in runner.policy.parameters())
    else:
        runner = rsl_rl.runners.OnPolicyRunner(env, rsl_rl_train_cfg(dims, spec["rsl_std_type"]), None, "cpu")
        params = sum(p.numel() for m in (runner.alg.actor, runner.alg.critic) for p in m.parameters())
    build_s = time.perf_counter() - t0

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    runner.learn(iters)
    t1 = time.perf_counter()
    learn_s, cpu_s = t1 - t0, time.process_time() - cpu0

    steps = iters * STEPS_PER_ENV * num_envs
    # Iteration i lasts from its first env step to the next iteration's first step (or the end of learn()).
    starts = env.iteration_starts
    iter_s = [b - a for a, b in zip(starts, starts[1:] + [t1])]
    result = {
        **spec,
        "torch_threads": torch.get_num_threads(),
        "num_params": params,
        "build_s": build_s,
        "learn_s": learn_s,
        "env_steps": steps,
        "steps_per_s": steps / learn_s,
        "cpu_s": cpu_s,
        "steps_per_cpu_s": steps / cpu_s,
        "iteration_s": iter_s,
        "steps_per_s_median_iteration": STEPS_PER_ENV * num_envs / C.median(iter_s),
        "env_step_s": env.step_time,
        "peak_rss_mib": C.peak_rss_mib(),
        "rss_before_runner_mib": rss_before,
        "mean_return": env.mean_return(),
        "episodes_finished": env.num_finished,
    }
    result["rss_growth_mib"] = result["peak_rss_mib"] - rss_before
    result.update(C.imported_rslkit())
    if spec["lib"] == "rslkit":
        result["rslkit_stats_mean_return"] = runner.stats.summary().get("Train/mean_return")
    C.write_child_result(result_path, result)


# ============================================================================================== parent side
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nets", nargs="+", default=["64-64", "256-256-256"], help="hidden sizes, e.g. 64-64")
    p.add_argument(
        "--iters", nargs="+", type=int, default=[20, 5], help="learning iterations per run, one per --nets entry"
    )
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads in every run (0: torch default)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--rsl-std-type", choices=["log", "scalar"], default="log", help="rsl_rl Gaussian std parameter")
    p.add_argument(
        "--rsl-malloc-tuned",
        action="store_true",
        help="give rsl_rl's runs the malloc tuning rslkit's runners apply (rslkit.utils.allocator)",
    )
    p.add_argument("--child-timeout", type=float, default=1800.0, help="seconds before a run is killed")
    p.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ppo_vs_rsl_rl.json)")
    p.add_argument("--logs", default=None, help="keep each child's console output in this folder")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 512 envs, 10 / 2 iterations")
    p.add_argument("--no-snapshot", action="store_true", help="import rslkit from the live tree, not a snapshot")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.seeds, args.num_envs, args.iters = [0], 512, [10, 2][: len(args.nets)] + [2] * max(0, len(args.nets) - 2)
        if args.out is None:
            args.out = str(C.RESULTS_DIR / "ppo_vs_rsl_rl_quick.json")
    if len(args.iters) != len(args.nets):
        p.error("--iters needs one value per --nets entry")
    return args


METRICS = {
    "steps_per_s": "whole learn() loop",
    "steps_per_s_median_iteration": "median iteration",
    "steps_per_cpu_s": "per CPU-second of the process",
}


def summarize(runs: list[dict[str, Any]], nets: list[str], seeds: list[int]) -> dict[str, Any]:
    """Per network: medians over seeds per library, ratio of medians and per-seed (paired) ratios rslkit / rsl_rl."""
    summary: dict[str, Any] = {}
    for net in nets:
        ok = [r for r in runs if r["net"] == net and "error" not in r]
        by = {lib: [r for r in ok if r["lib"] == lib] for lib in ("rslkit", "rsl_rl")}
        keys = [*METRICS, "peak_rss_mib", "rss_growth_mib", "mean_return"]
        med = {lib: {k: C.median([r[k] for r in rs if r.get(k) is not None]) for k in keys} for lib, rs in by.items()}
        s: dict[str, Any] = {"median": med, "ratio_of_medians": {}, "paired_ratios": {}, "median_paired_ratio": {}}
        for k in [*METRICS, "peak_rss_mib"]:
            s["ratio_of_medians"][k] = med["rslkit"][k] / med["rsl_rl"][k]
            pairs = []
            for seed in seeds:
                a = [r for r in by["rslkit"] if r["seed"] == seed]
                b = [r for r in by["rsl_rl"] if r["seed"] == seed]
                if a and b:
                    pairs.append(a[0][k] / b[0][k])
            s["paired_ratios"][k] = pairs
            s["median_paired_ratio"][k] = C.median(pairs)
        summary[net] = s
    return summary


def main() -> None:
    args = parse_args()
    if args.child is not None:
        child_main(json.loads(args.child), args.result)
        return

    info = C.machine_info(["rslkit", "rsl-rl-lib", "tensordict", "numpy"])
    snapshot, fingerprint = (None, None) if args.no_snapshot else C.snapshot_code()
    if snapshot is not None:
        info["code_snapshot"], info["rslkit_fingerprint"] = str(snapshot), fingerprint
    info["run_threads"] = args.threads or f"torch default ({info['torch_num_threads']})"
    C.print_machine_info(info)
    nets = [[int(x) for x in n.split("-")] for n in args.nets]
    # Order alternates from seed to seed within a network and from network to network within a seed, so each
    # library goes first equally often (up to one run) for every network.
    plan = []
    for i, seed in enumerate(args.seeds):
        for j, (dims, iters) in enumerate(zip(nets, args.iters)):
            order = ["rslkit", "rsl_rl"] if (i + j) % 2 == 0 else ["rsl_rl", "rslkit"]
            for pos, lib in enumerate(order):
                plan.append({"lib": lib, "dims": dims, "iters": iters, "seed": seed, "position": pos})
    print(
        f"{len(plan)} runs: seeds {args.seeds}, nets {args.nets}, iterations {args.iters}, {args.num_envs} envs, "
        f"{STEPS_PER_ENV} steps/env/iteration; order alternates\n",
        flush=True,
    )

    script = str(Path(__file__).resolve())
    logs = Path(args.logs) if args.logs else None
    runs: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for k, item in enumerate(plan):
        net = "-".join(map(str, item["dims"]))
        spec = {
            **item,
            "net": net,
            "num_envs": args.num_envs,
            "rsl_std_type": args.rsl_std_type,
            "rsl_malloc_tuned": args.rsl_malloc_tuned,
            "threads": args.threads,
            "run_id": f"{k:02d}_{item['lib']}_{net}_s{item['seed']}",
        }
        print(f"[{k + 1}/{len(plan)}] {item['lib']:<6} net {net:<12} seed {item['seed']} ... ", end="", flush=True)
        res = {**spec, **C.run_child(script, spec, args.child_timeout, logs, snapshot)}
        runs.append(res)
        if "error" in res:
            print("FAILED", flush=True)
        else:
            print(
                f"{res['steps_per_s']:>8,.0f} steps/s (median it. {res['steps_per_s_median_iteration']:>8,.0f}, "
                f"per CPU-s {res['steps_per_cpu_s']:>8,.0f})  learn {res['learn_s']:6.1f} s  "
                f"peak RSS {res['peak_rss_mib']:5.0f} MiB  return {C.fmt(res['mean_return'])}",
                flush=True,
            )
    total_s = time.perf_counter() - t_start

    # ------------------------------------------------------------------ per-run table
    print("\nPer run (steps/s: whole loop | median iteration | per CPU-second)")
    headers = ["net", "seed", "lib", "pos", "iters", "params", "learn s", "steps/s", "med. it.", "per CPU-s",
               "env s", "peak MiB", "growth MiB", "return", "rslkit stats"]  # fmt: skip
    rows = []
    for r in runs:
        if "error" in r:
            rows.append([r["net"], r["seed"], r["lib"], r["position"], r["iters"], "FAILED"] + [""] * 9)
            continue
        rows.append([
            r["net"], r["seed"], r["lib"], r["position"], r["iters"], r["num_params"], C.fmt(r["learn_s"]),
            C.fmt(r["steps_per_s"], ",.0f"), C.fmt(r["steps_per_s_median_iteration"], ",.0f"),
            C.fmt(r["steps_per_cpu_s"], ",.0f"), C.fmt(r["env_step_s"]), C.fmt(r["peak_rss_mib"], ".0f"),
            C.fmt(r["rss_growth_mib"], ".0f"), C.fmt(r["mean_return"]), C.fmt(r.get("rslkit_stats_mean_return")),
        ])  # fmt: skip
    C.print_table(headers, rows)

    # ------------------------------------------------------------------ summary and ratios
    summary = summarize(runs, args.nets, args.seeds)
    print("\nSummary: medians over seeds; ratio rows = rslkit / rsl_rl (ratio of medians; median of per-seed ratios)")
    srows = []
    for net, s in summary.items():
        for lib in ("rslkit", "rsl_rl"):
            m = s["median"][lib]
            srows.append([net, lib, *(C.fmt(m[k], ",.0f") for k in METRICS), C.fmt(m["peak_rss_mib"], ".0f"),
                          C.fmt(m["rss_growth_mib"], ".0f"), C.fmt(m["mean_return"])])  # fmt: skip
        for label, d in (("ratio of medians", s["ratio_of_medians"]), ("median paired", s["median_paired_ratio"])):
            srows.append([net, label, *(C.fmt(d[k], ".3f") for k in METRICS), C.fmt(d["peak_rss_mib"], ".3f"), "", ""])
    C.print_table(["net", "lib", "steps/s", "med. it.", "per CPU-s", "peak MiB", "growth MiB", "return"], srows)
    for net, s in summary.items():
        print(f"{net}: rslkit / rsl_rl steps/s per seed:")
        for k, label in METRICS.items():
            per = " ".join(f"{x:.3f}" for x in s["paired_ratios"][k])
            print(f"    {label:<32} {per}  -> median {s['median_paired_ratio'][k]:.3f}")

    info["rslkit_fingerprints_seen"] = C.check_fingerprints(runs, fingerprint)
    if snapshot is not None:
        shutil.rmtree(snapshot, ignore_errors=True)
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    info["total_wall_s"] = total_s
    print(f"\nTotal wall time {total_s / 60:.1f} min; load average at end {info['loadavg_at_end']}")
    payload = {
        "benchmark": "ppo_vs_rsl_rl",
        "machine": info,
        "settings": {
            "task": "pendulum",
            "num_envs": args.num_envs,
            "steps_per_env": STEPS_PER_ENV,
            "nets": args.nets,
            "iters": args.iters,
            "seeds": args.seeds,
            "rsl_std_type": args.rsl_std_type,
            "rsl_malloc_tuned": args.rsl_malloc_tuned,
            "threads": args.threads or "torch default",
            "rsl_rl_train_cfg_64": rsl_rl_train_cfg([64, 64], args.rsl_std_type),
        },
        "summary": summary,
        "runs": runs,
    }
    path = C.write_results("ppo_vs_rsl_rl", payload, args.out)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
