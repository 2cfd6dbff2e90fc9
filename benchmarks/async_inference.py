"""Synchronous vs naive asynchronous vs VLASH-style asynchronous chunk execution on a simulated 2-DoF arm.

The arm tracks absolute joint targets with a first-order lag and a joint speed limit (``q <- q + clip(0.5 (target -
q), +-0.04)`` per 20 ms tick, the policy's own speed: a target that jumps ahead is not reached any faster). A
scripted chunk policy (a stand-in for a trained one) plans ``H = 16`` targets from the observed joints towards the
current goal at <= 0.04 rad per tick. Ten goals come one after another; each is reached when both joints are within
0.03 rad. Inference latency is injected (50-300 ms, +-20 % jitter) on a fake clock, so runs are deterministic and
fast. Modes:

* ``sync``: observe, infer, execute the whole chunk; the arm holds its last target while the policy thinks.
* ``naive-async``: request early, chunk aligned to its observation tick, actions whose time passed are dropped
  (LeRobot-style queue without blending).
* ``vlash``: request early, chunk starts ``d`` ticks later and is conditioned on the joints rolled forward through
  the ``d`` pending targets (VLASH future-state awareness), replace-from merge.
* ``vlash-blend`` / ``vlash-ensemble``: the same requests, merged by blending / ACT temporal ensembling.

Metrics: task completion time (s), reaction latency after a goal jump (s, median: first tick executing a chunk that
saw the new goal), stall fraction, mean action jump at chunk boundaries (rad), stale actions dropped.

Usage: ``python benchmarks/async_inference.py``; writes ``benchmarks/results/async_inference.json``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import numpy as np

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg
from rslkit.deploy.clock import FakeClock
from rslkit.deploy.future_state import FutureStateConditioner
from rslkit.deploy.inference_worker import InferenceRequest, SimulatedInference

RATE, H, MAX_STEP, MAX_SPEED, TOL, NUM_GOALS, MAX_TICKS = 50.0, 16, 0.04, 0.04, 0.03, 10, 3000
RESULTS = Path(__file__).resolve().parent / "results" / "async_inference.json"


class Arm:
    """2-DoF joint-space arm with a lagging position controller and a goal sequence; obs ``[q1, q2, g1, g2]``."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.goals = rng.uniform(-1.0, 1.0, (NUM_GOALS, 2)).astype(np.float32)
        self.q = np.zeros(2, np.float32)
        self.target = self.q.copy()
        self.goal_index, self.tick = 0, 0
        self.switch_ticks = [0]
        self.done_tick: int | None = None

    def observe(self) -> np.ndarray:
        goal = self.goals[min(self.goal_index, NUM_GOALS - 1)]
        return np.concatenate([self.q, goal]).astype(np.float32)

    def act(self, action: np.ndarray) -> None:
        self.target = np.asarray(action, np.float32)

    def advance(self, tick: int, action: np.ndarray | None) -> None:
        """Physics for one tick (called after the engine's tick)."""
        self.q = self.q + np.clip(0.5 * (self.target - self.q), -MAX_SPEED, MAX_SPEED)
        self.tick = tick + 1
        if self.goal_index < NUM_GOALS and np.abs(self.q - self.goals[self.goal_index]).max() < TOL:
            self.goal_index += 1
            if self.goal_index == NUM_GOALS:
                self.done_tick = self.tick
            else:
                self.switch_ticks.append(self.tick)


def plan_chunk(obs: np.ndarray) -> np.ndarray:
    """Targets ``[H, 2]`` from the observed joints straight towards the goal, at most ``MAX_STEP`` per tick."""
    q, goal = obs[:2], obs[2:]
    steps = MAX_STEP * np.arange(1, H + 1, dtype=np.float32)[:, None]
    return (q + np.clip(goal - q, -steps, steps)).astype(np.float32)


MODES = {
    "sync": (AsyncEngineCfg(sync=True), False),
    "naive-async": (AsyncEngineCfg(chunk_start="observation"), False),
    "vlash": (AsyncEngineCfg(chunk_start="delay", merge="replace"), True),
    "vlash-blend": (AsyncEngineCfg(chunk_start="delay", merge="blend"), True),
    "vlash-ensemble": (AsyncEngineCfg(chunk_start="delay", merge="ensemble"), True),
}


def run(mode: str, latency_s: float, seed: int) -> dict[str, float]:
    """One episode of ``NUM_GOALS`` goals; returns the metrics."""
    base, conditioned = MODES[mode]
    cfg = AsyncEngineCfg(**{**base.__dict__, "rate_hz": RATE, "initial_latency_s": latency_s})
    clock, arm, rng = FakeClock(), Arm(seed), np.random.default_rng(seed + 1000)
    goal_of_request: dict[int, np.ndarray] = {}

    def latency(request: InferenceRequest) -> float:
        goal_of_request[request.request_id] = np.asarray(request.obs)[2:].copy()
        return float(latency_s * rng.uniform(0.8, 1.2))

    inference = SimulatedInference(plan_chunk, clock, latency)
    conditioner = FutureStateConditioner("absolute", slice(0, 2)) if conditioned else None
    engine = AsyncChunkEngine(arm, inference, clock, cfg, conditioner, tick_hook=arm.advance)
    engine.run(MAX_TICKS, until=lambda: arm.done_tick is not None)
    stats = engine.stats.summary()
    reactions = []
    for goal_idx, switch in enumerate(arm.switch_ticks[1:], start=1):
        goal = arm.goals[goal_idx]
        for t in range(switch, len(engine.executed_chunks)):
            rid = engine.executed_chunks[t]
            if rid is not None and np.allclose(goal_of_request[rid], goal):
                reactions.append((t - switch) / RATE)
                break
    return {
        "completion_s": (arm.done_tick or MAX_TICKS) / RATE,
        "finished": float(arm.done_tick is not None),
        "reaction_median_s": float(np.median(reactions)) if reactions else float("nan"),
        "stall_fraction": stats["stall_fraction"],
        "boundary_jump_mean": stats["boundary_jump_mean"],
        "stale_actions": stats["stale_actions"],
    }


def main() -> None:
    logging.getLogger("rslkit.deploy.async_engine").setLevel(logging.ERROR)  # starvation is measured, not logged
    latencies, seeds = (0.05, 0.1, 0.2, 0.3), range(5)
    rows = []
    print("| latency (ms) | mode | completion (s) | reaction median (s) | stall fraction | boundary jump (rad) |")
    print("|---|---|---|---|---|---|")
    for latency_s in latencies:
        for mode in MODES:
            runs = [run(mode, latency_s, s) for s in seeds]
            mean = {k: float(np.nanmean([r[k] for r in runs])) for k in runs[0]}
            rows.append({"latency_s": latency_s, "mode": mode, **mean})
            print(
                f"| {latency_s * 1e3:.0f} | {mode} | {mean['completion_s']:.2f} | {mean['reaction_median_s']:.2f} "
                f"| {mean['stall_fraction']:.2f} | {mean['boundary_jump_mean']:.3f} |",
                flush=True,
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "command": "python benchmarks/async_inference.py",
                "seeds": list(seeds),
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
