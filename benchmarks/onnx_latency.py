"""Batch-1 inference latency: ONNX Runtime (raw session and the validating ``OnnxPolicy``) vs torch eager.

Policies (random weights; latency does not depend on training):

* ``mlp-pendulum``: the pendulum PPO actor (3 -> 64, 64 -> 1).
* ``mlp-locomotion``: a legged-robot-sized PPO actor (48 -> 512, 256, 128 -> 12).
* ``flow-pendulum-K{1,4}``: the pendulum flow-bc policy (chunk 4, 64 wide, 2 blocks).
* ``flow-arm-K{1,4}``: a 7-DoF arm chunk policy (obs 32, chunk 16, 256 wide, 3 blocks).

Usage: ``python benchmarks/onnx_latency.py [--iters 2000] [--threads 1]``; writes
``benchmarks/results/onnx_latency.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from tensordict import TensorDict

from rslkit.deploy.export import export_policy
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.models.actor_critic import ActorCritic, PolicyCfg
from rslkit.models.flow import FlowPolicy, FlowPolicyCfg

RESULTS = Path(__file__).resolve().parent / "results" / "onnx_latency.json"


def _timeit(fn, iters: int, warmup: int = 100) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    times = np.empty(iters)
    for i in range(iters):
        t = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t
    us = times * 1e6
    return {"median_us": float(np.median(us)), "p99_us": float(np.percentile(us, 99)), "mean_us": float(us.mean())}


def _mlp(obs_dim: int, hidden: tuple[int, ...], actions: int) -> ActorCritic:
    obs = TensorDict({"policy": torch.zeros(1, obs_dim)}, batch_size=[1])
    return ActorCritic(obs, actions, PolicyCfg(actor_hidden_dims=hidden, critic_hidden_dims=(8,)))


def cases() -> list[tuple[str, torch.nn.Module, dict]]:
    """``(name, policy, export kwargs)`` for every benchmarked policy."""
    out: list[tuple[str, torch.nn.Module, dict]] = [
        ("mlp-pendulum", _mlp(3, (64, 64), 1), {}),
        ("mlp-locomotion", _mlp(48, (512, 256, 128), 12), {}),
    ]
    pend = FlowPolicy(3, 1, FlowPolicyCfg(horizon=4, hidden_dim=64, num_blocks=2))
    arm = FlowPolicy(32, 7, FlowPolicyCfg(horizon=16, hidden_dim=256, num_blocks=3))
    for k in (1, 4):
        out.append((f"flow-pendulum-K{k}", pend, {"num_flow_steps": k}))
        out.append((f"flow-arm-K{k}", arm, {"num_flow_steps": k}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads and ORT intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, policy, kwargs in cases():
            path = Path(tmp) / f"{name}.onnx"
            meta = export_policy(policy, path, "bench", **kwargs)
            rng = np.random.default_rng(0)
            obs = rng.standard_normal((1, meta.obs_groups[meta.group_names[0]][0])).astype(np.float32)
            feeds = {meta.group_names[0]: obs}
            noise = None
            if meta.kind == "chunk":
                noise = rng.standard_normal((1, *meta.noise_shape)).astype(np.float32)
                feeds["noise"] = noise
                obs_t, noise_t = torch.from_numpy(obs), torch.from_numpy(noise)

                def torch_fn(policy=policy, obs_t=obs_t, noise_t=noise_t, k=kwargs["num_flow_steps"]):
                    with torch.inference_mode():
                        return policy.act_chunk(obs_t, noise_t, k)

            else:
                td = TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[1])

                def torch_fn(policy=policy, td=td):
                    with torch.inference_mode():
                        return policy.act_inference(td)

            options = ort.SessionOptions()
            options.intra_op_num_threads = args.threads
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            wrapped = OnnxPolicy(path, intra_op_threads=args.threads)
            row = {
                "policy": name,
                "torch_eager": _timeit(torch_fn, args.iters),
                "ort_session": _timeit(lambda s=session, f=feeds: s.run(None, f), args.iters),
                "ort_onnx_policy": _timeit(lambda w=wrapped, o=obs, n=noise: w(o, n), args.iters),
            }
            rows.append(row)
            med = {k: v["median_us"] for k, v in row.items() if isinstance(v, dict)}
            print(
                f"{name:20s} torch {med['torch_eager']:8.1f} us | ort {med['ort_session']:7.1f} us"
                f" | OnnxPolicy {med['ort_onnx_policy']:7.1f} us (median)",
                flush=True,
            )
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": f"python benchmarks/onnx_latency.py --iters {args.iters} --threads {args.threads}",
        "torch": torch.__version__,
        "onnxruntime": ort.__version__,
        "machine": platform.processor() or platform.machine(),
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print("\n| policy | torch eager median / p99 (us) | ORT session median / p99 (us) | OnnxPolicy median (us)", end="")
    print(" | speed-up |")
    print("|---|---|---|---|---|")
    for r in rows:
        te, ors, op = r["torch_eager"], r["ort_session"], r["ort_onnx_policy"]
        print(
            f"| {r['policy']} | {te['median_us']:.0f} / {te['p99_us']:.0f} | {ors['median_us']:.0f} / "
            f"{ors['p99_us']:.0f} | {op['median_us']:.0f} | {te['median_us'] / ors['median_us']:.1f}x |"
        )


if __name__ == "__main__":
    main()
