"""Env steps/s of the ``warp`` backend (MuJoCo Warp) vs the ``mujoco`` backend (C MuJoCo) on the same models,
interleaved in one run (the 2 shared cores are noisy).

On a CPU this measures the code path CI tests, not a fast simulator: Warp runs each CPU kernel on one thread
and launches ~100 kernels per physics step. The GPU figure is what the backend is for; run the same script there:

    python benchmarks/warp_throughput.py --device cuda --num_envs 1024 4096 16384 --seconds 5

One env step = one control step = ``decimation`` physics steps (SO-101: 10 x 2 ms; Go2: 4 x 5 ms, floor contacts)
from a standing / mid-range start with random controls, through ``WarpBackend.step`` and ``MujocoBackend.step``
(physics + derived fields at the new state, controls in and state out as torch tensors). Rounds repeat the rows in
turn; ratios are medians of per-round ratios.

Usage: ``python benchmarks/warp_throughput.py [--num_envs 16 64 256] [--seconds 2] [--rounds 2] [--sim_threads 2]
[--models so101 go2] [--device cpu] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import mujoco
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine_info, print_machine_info, print_table, write_results  # noqa: E402
from rslkit.envs.mujoco import ModelNotFoundError, MujocoBackend, MujocoBackendCfg, load_so101  # noqa: E402
from rslkit.envs.mujoco.warp_backend import WarpBackend, WarpBackendCfg  # noqa: E402


def _models(names: list[str]) -> dict[str, tuple[mujoco.MjModel, int, Callable[[int], torch.Tensor]]]:
    """name -> (model, decimation, sampler of random controls [n, nu] in float64)."""
    out = {}
    if "so101" in names:
        m = load_so101()
        low, high = torch.as_tensor(m.actuator_ctrlrange).T
        out["so101"] = (m, 10, lambda n, lo=low, hi=high: lo + (hi - lo) * torch.rand(n, len(lo), dtype=torch.float64))
    if "go2" in names:
        try:
            from rslkit.envs.mujoco.go2 import load_go2
            from rslkit.envs.tasks.go2_flat import HOME

            m = load_go2()
        except (ImportError, ModelNotFoundError) as err:
            print(f"skipping go2: {err}")
        else:
            home = torch.tensor(HOME, dtype=torch.float64)
            out["go2"] = (m, 4, lambda n, h=home: h + 0.125 * torch.randn(n, len(h), dtype=torch.float64))
    return out


def _start(backend, model: mujoco.MjModel, name: str) -> None:
    """Standing Go2 (trunk at 0.3 m, home joints) or SO-101 at mid-range."""
    n = backend.num_envs
    q = torch.as_tensor(model.qpos0, dtype=torch.float64).repeat(n, 1)
    if name == "go2":
        from rslkit.envs.tasks.go2_flat import HOME

        q[:, 2] = 0.30
        q[:, 7:] = torch.tensor(HOME, dtype=torch.float64)
        backend.set_joint_state(torch.arange(n), q, ctrl=q[:, 7:])
    else:
        mid = torch.as_tensor(model.actuator_ctrlrange, dtype=torch.float64).mean(1)
        backend.set_joint_state(torch.arange(n), mid.repeat(n, 1), ctrl=mid.repeat(n, 1))


def _rate(backend, sample: Callable[[int], torch.Tensor], seconds: float) -> float:
    """Env steps/s of ``backend.step`` with fresh random controls each call (controls drawn outside the clock)."""
    n, calls, elapsed = backend.num_envs, 0, 0.0
    while elapsed < seconds:
        ctrl = sample(n)
        t0 = time.perf_counter()
        backend.step(ctrl)
        elapsed += time.perf_counter() - t0
        calls += 1
    return calls * n / elapsed


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per row and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sim_threads", type=int, default=2, help="threads of the C MuJoCo backend")
    parser.add_argument("--models", nargs="+", default=["so101", "go2"], choices=["so101", "go2"])
    parser.add_argument("--device", default="cpu", help="device of the warp backend (cpu or cuda)")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/warp_throughput.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    info = machine_info(["mujoco", "mujoco-warp", "warp-lang", "torch"])
    info["note"] = "2-core shared machine, other work running: rates are noisy; ratios are per-round medians"
    print_machine_info(info)
    models = _models(args.models)
    payload: dict = {"machine": info, "device": args.device, "sim_threads": args.sim_threads, "rows": []}
    rows = []
    for name, (model, dec, sample) in models.items():
        for n in args.num_envs:
            backends = {
                "warp": WarpBackend(model, n, WarpBackendCfg(decimation=dec), device=args.device),
                "mujoco": MujocoBackend(model, n, MujocoBackendCfg(sim_threads=args.sim_threads, decimation=dec)),
            }
            for b in backends.values():
                _start(b, model, name)
                b.step(sample(n))  # warm-up (loads Warp's kernels)
            rates: dict[str, list[float]] = {"warp": [], "mujoco": []}
            for _ in range(args.rounds):
                for key, b in backends.items():
                    rates[key].append(_rate(b, sample, args.seconds))
            ratio = statistics.median(w / c for w, c in zip(rates["warp"], rates["mujoco"]))
            row = {
                "model": name,
                "num_envs": n,
                "warp_env_steps_per_s": statistics.median(rates["warp"]),
                "mujoco_env_steps_per_s": statistics.median(rates["mujoco"]),
                "warp_over_mujoco": ratio,
                "rounds": rates,
            }
            payload["rows"].append(row)
            rows.append(
                [
                    name,
                    n,
                    f"{row['warp_env_steps_per_s']:,.0f}",
                    f"{row['mujoco_env_steps_per_s']:,.0f}",
                    f"{ratio:.4f}",
                ]
            )
            for b in backends.values():
                b.close()
    print_table(["model", "num_envs", f"warp ({args.device}) steps/s", "mujoco steps/s", "warp/mujoco"], rows)
    path = write_results("warp_throughput", payload, args.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
