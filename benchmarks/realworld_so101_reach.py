"""Env steps to 90 % success on so101-reach: Stable-Baselines3 SAC vs rslkit's real-world loop with one actor.

Run (results in benchmarks/results/realworld_so101_reach.json, written after each run; at the 30000-step cap one
seed takes up to ~8 min for SB3 and ~30 min for rslkit at UTD 4 on a loaded 2-core machine, both ~70 updates/s):

    .venv/bin/python benchmarks/realworld_so101_reach.py --seeds 0 1 2
    .venv/bin/python benchmarks/realworld_so101_reach.py --parts rslkit --utd 10    # one part, another UTD

Both learn ``so101-reach`` (rslkit's MuJoCo task with one env: 60-step episodes, no terminations; success = the
end effector within 2 cm of the target at the episode's last step, the task's ``extras["success"]``).

- ``sb3``: ``SAC("MlpPolicy", learning_rate=1e-3)``, otherwise SB3 defaults (256-256 networks, batch 256, 1 update
  per env step, learning_starts 100 random steps, tau 0.005, gamma 0.99), on a ``gymnasium.Env`` adapter around the
  task (:class:`ReachGymEnv`: the ``policy`` observation group, actions in ``[-1, 1]^5``, time-outs as truncations
  with the true final observation).
- ``rslkit``: ``python -m rslkit.realworld local --task so101-reach`` inside ``unshare -n`` (loopback only): a
  learner process (SAC with the real-world defaults of ``rslkit/realworld/defaults.py``: batch 256, LayerNorm
  critics, 1-step targets, learning_starts 200, UTD ``--utd`` (4)) and one actor process stepping the task unpaced
  (``--actor.realtime false``) and in lockstep with the learner (``--actor.lockstep true``: each episode end waits
  until the learner did the updates owed for the data so far), so the result is in env steps, whatever this
  machine's speed. The actor acts with the learner's (random) initial policy from the first step.

Criterion: the success rate over the last ``--window`` (20) finished training episodes >= ``--target`` (0.9). Each
run reports the env steps and wall seconds at which it is first reached (SB3: since ``learn()`` starts; rslkit: since
the actor starts acting), and stops there, or at ``--max-steps`` (30000) env steps (then ``reached_env_steps`` is
null). Torch runs at ``--threads`` (1) threads in both.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "realworld_so101_reach.json"
TASK = "so101-reach"
SB3_HYPERPARAMETERS = {"learning_rate": 1e-3}


def first_reached(successes: list[float], window: int, target: float) -> int | None:
    """Index of the first episode whose last ``window`` successes (itself included) average >= ``target``."""
    for i in range(window - 1, len(successes)):
        if sum(successes[i + 1 - window : i + 1]) / window >= target:
            return i
    return None


# ============================================================================================== SB3
class ReachGymEnv(gym.Env):
    """One env of an rslkit task as a ``gymnasium.Env`` (rslkit's env resets itself at episode ends).

    Observation ``[D]`` float32: the ``policy`` group. Action ``[A]`` in ``[-1, 1]``. At an episode's end the step
    returns the observation before the auto-reset (``extras["final_obs"]``) and ``info["is_success"]``;
    :meth:`reset` then returns the env's current observation, the new episode's first.
    """

    def __init__(self, task: str, seed: int) -> None:
        from rslkit.envs.registry import get_task

        spec = get_task(task)
        cfg = spec.env_cfg()
        cfg.num_envs, cfg.seed = 1, seed
        self.env = spec.make_env(cfg, "cpu")
        if hasattr(self.env, "request_final_obs"):
            self.env.request_final_obs()
        dim = self.env.get_observations()["policy"].shape[-1]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.env.num_actions,), np.float32)

    @staticmethod
    def _obs(obs: Any) -> np.ndarray:
        return obs["policy"][0].detach().cpu().numpy().astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._obs(self.env.get_observations()), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        actions = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)
        obs, rewards, dones, extras = self.env.step(actions)
        done = bool(dones[0])
        truncated = done and bool(extras["time_outs"][0])
        info: dict[str, Any] = {}
        if done:
            obs = extras.get("final_obs", obs)
            success = extras.get("success")
            info["is_success"] = bool(success[0]) if success is not None else False
        return self._obs(obs), float(rewards[0]), done and not truncated, truncated, info


def run_sb3(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """SB3 SAC until the success window reaches the target or ``--max-steps``."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    class Watch(BaseCallback):
        """Records each finished episode's success; stops the run at the criterion."""

        def __init__(self) -> None:
            super().__init__()
            self.successes: list[float] = []
            self.ends: list[int] = []
            self.window: deque[float] = deque(maxlen=args.window)
            self.reached: tuple[int, float] | None = None
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            for done, info in zip(self.locals["dones"], self.locals["infos"]):
                if done:
                    self.successes.append(float(info.get("is_success", False)))
                    self.ends.append(self.num_timesteps)
                    self.window.append(self.successes[-1])
            full = len(self.window) == args.window
            if full and sum(self.window) / args.window >= args.target:
                self.reached = (self.num_timesteps, time.perf_counter() - self.t0)
                return False
            return True

    C.seed_all(seed)
    t0 = time.perf_counter()
    env = ReachGymEnv(TASK, seed)
    model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **SB3_HYPERPARAMETERS)
    build_s = time.perf_counter() - t0
    watch = Watch()
    model.learn(total_timesteps=args.max_steps, callback=watch)
    loop_s = time.perf_counter() - watch.t0
    return {
        "reached_env_steps": watch.reached[0] if watch.reached else None,
        "reached_s": watch.reached[1] if watch.reached else None,
        "env_steps": model.num_timesteps,
        "episodes": len(watch.successes),
        "final_success_rate": _rate(watch.successes, args.window),
        "updates": model._n_updates,
        "build_s": build_s,
        "loop_s": loop_s,
        "env_steps_per_s": model.num_timesteps / loop_s,
        "successes": watch.successes,
        "episode_end_env_steps": watch.ends,
    }


def _rate(successes: list[float], window: int) -> float | None:
    last = successes[-window:]
    return sum(last) / len(last) if last else None


# ============================================================================================== rslkit
def _read_episodes(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open() as f:
        return [row for row in csv.DictReader(f) if row.get("wall_s")]  # a half-written last line has no wall_s


def _successes(episodes: list[dict[str, str]]) -> list[float]:
    return [float(e["success"]) if e["success"] not in ("", "None") else 0.0 for e in episodes]


def run_rslkit(seed: int, args: argparse.Namespace, logdir: Path) -> dict[str, Any]:
    """One ``realworld local`` run, watched until the criterion (then stopped with SIGINT) or ``--max-steps``."""
    run_name = f"so101_reach_s{seed}"
    cmd = [
        sys.executable, "-m", "rslkit.realworld", "local", "--task", TASK, "--seed", str(seed),
        "--logdir", str(logdir), "--run_name", run_name, "--max_iterations", "1000000", "--threads", str(args.threads),
        "--agent.logger", "", "--actor.realtime", "false", "--actor.lockstep", "true",
        "--actor.max_env_steps", str(args.max_steps), "--agent.algorithm.utd_ratio", str(args.utd),
    ]  # fmt: skip
    lo_up = f"{sys.executable} {ROOT / 'tests' / 'ros2' / 'lo_up.py'}"
    quoted = " ".join(f"'{c}'" for c in cmd)
    # exec: the launcher replaces the shell, so SIGINT reaches it (it then stops the learner and the actor cleanly)
    full = ["unshare", "-n", "sh", "-c", f"{lo_up} && exec {quoted}"] if shutil.which("unshare") else cmd
    pattern = f"*/*_realworld_{run_name}"
    before = set(logdir.glob(pattern))
    log = logdir / f"{run_name}.log"
    t_start = time.perf_counter()
    acting_since = reached = None
    with log.open("w") as out:
        proc = subprocess.Popen(full, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                if time.perf_counter() - t_start > args.timeout:
                    raise TimeoutError(f"rslkit seed {seed} ran over --timeout {args.timeout:.0f} s; see {log}")
                new = sorted(set(logdir.glob(pattern)) - before)
                csv_path = new[-1] / "actor-0" / "episodes.csv" if new else None
                if csv_path is None or not csv_path.exists():
                    continue
                acting_since = acting_since or time.perf_counter()
                if reached is None:
                    i = first_reached(_successes(_read_episodes(csv_path)), args.window, args.target)
                    if i is not None:
                        reached = time.perf_counter() - acting_since
                        proc.send_signal(signal.SIGINT)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(180)
    if proc.returncode not in (0, -signal.SIGINT, 130) and reached is None:
        raise RuntimeError(f"rslkit seed {seed} exited with code {proc.returncode}; see {log}")
    run_dir = sorted(set(logdir.glob(pattern)) - before)[-1]
    return {**analyse(run_dir, args), "reached_s": reached, "total_s": time.perf_counter() - t_start}


def analyse(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Env steps to the criterion from the actor's episodes.csv; learner figures from metrics.csv."""
    episodes = _read_episodes(run_dir / "actor-0" / "episodes.csv")
    successes = _successes(episodes)
    i = first_reached(successes, args.window, args.target)
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "reached_env_steps": int(episodes[i]["env_steps"]) if i is not None else None,
        "env_steps": int(episodes[-1]["env_steps"]) if episodes else 0,
        "episodes": len(episodes),
        "final_success_rate": _rate(successes, args.window),
        "acting_s": sum(float(e["wall_s"]) for e in episodes),
        "successes": successes,
        "episode_end_env_steps": [int(e["env_steps"]) for e in episodes],
    }
    metrics_path = run_dir / "metrics.csv"
    if metrics_path.exists():
        with metrics_path.open() as f:
            metrics = list(csv.DictReader(f))
        busy = [float(m["Perf/updates_per_s"]) for m in metrics if float(m.get("Perf/updates") or 0) > 0]
        if metrics:
            updates = float(metrics[-1]["Perf/total_updates"])
            result["updates"] = updates
            result["effective_utd"] = updates / max(float(metrics[-1]["Perf/total_env_steps"]), 1.0)
        result["updates_per_s_median"] = sorted(busy)[len(busy) // 2] if busy else None
    return result


# ============================================================================================== main
def machine() -> dict[str, Any]:
    """Date, CPU, load and package versions (no git: other work may hold the repository)."""
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": C.cpu_model(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "packages": {d: version(d) for d in ("torch", "stable-baselines3", "gymnasium", "mujoco", "numpy")},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--parts", nargs="+", default=["sb3", "rslkit"], choices=["sb3", "rslkit"])
    p.add_argument("--max-steps", type=int, default=30_000, help="env step cap per run")
    p.add_argument("--window", type=int, default=20, help="finished training episodes in the success rate")
    p.add_argument("--target", type=float, default=0.9, help="success rate to reach")
    p.add_argument("--utd", type=int, default=4, help="rslkit: updates per transition (lockstep)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads in both parts")
    p.add_argument("--timeout", type=float, default=4 * 3600.0, help="rslkit: wall-clock limit of one run (s)")
    p.add_argument("--logdir", default="/tmp/rslkit_bench_realworld_so101_reach")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    logdir = Path(args.logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "benchmark": "realworld_so101_reach",
        "machine": machine(),
        "settings": vars(args),
        "sb3_hyperparameters": SB3_HYPERPARAMETERS,
        "runs": {part: {} for part in args.parts},
    }
    for seed in args.seeds:
        for part in args.parts:
            result = run_sb3(seed, args) if part == "sb3" else run_rslkit(seed, args, logdir)
            results["runs"][part][str(seed)] = result
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=1))  # after every run: a cut session keeps what finished
            speed = (
                f"{result['env_steps_per_s']:.0f} env steps/s"
                if part == "sb3"
                else f"{C.fmt(result.get('updates_per_s_median'), '.0f')} updates/s, UTD "
                f"{C.fmt(result.get('effective_utd'), '.2f')}"
            )
            print(
                f"{part:<6} seed {seed}: reached at {C.fmt(result['reached_env_steps'], 'd')} env steps "
                f"({C.fmt(result['reached_s'])} s); {result['env_steps']} env steps, {result['episodes']} episodes, "
                f"last-{args.window} success {C.fmt(result['final_success_rate'], '.2f')}; {speed}",
                flush=True,
            )


if __name__ == "__main__":
    main()
