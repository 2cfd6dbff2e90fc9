"""Synchronous vs naive async vs VLASH-style async execution of a learned flow chunk policy on the simulated SO-101.

The arm (``so101-reach``, C MuJoCo, one env) runs at 50 Hz on the wall clock (``MonotonicClock``: absolute
deadlines, a late tick runs at once and counts). The end-effector target jumps every ``--segment_s`` seconds to a
new reachable point. Chunk inference runs on a worker thread (``ThreadedInference``): the exported ONNX policy
computes the chunk (initial flow noise zeros, the mean chunk; ``--noise random`` draws it), then the thread sleeps
until the injected latency ``L`` (x U(0.9, 1.1)) has passed since the request. ``--rt_priority P`` runs the
control thread under ``SCHED_FIFO`` (``rslkit.deploy.clock.set_realtime_priority``), ``--worker_rt_priority Q``
the inference worker thread too (``Q < P``). Modes:

* ``sync``: observe, infer, execute the whole chunk; the arm holds its last target while the policy thinks.
* ``naive``: request whenever the worker is idle; the chunk is aligned to its observation tick and the actions
  whose time passed during inference are dropped (LeRobot-style queue, replace merge).
* ``vlash``: request whenever idle; the chunk starts ``d = ceil(p95 latency / period)`` ticks after its
  observation, and the policy trained with future-state offsets (``--vlash``) gets the joint state rolled forward
  through the ``d`` pending absolute targets in its ``future_state`` input (replace-from merge).
* ``delay``: ablation: ``vlash`` scheduling with the plain policy (no future state).
* ``<mode>@n`` (e.g. ``vlash@3``): ``n`` requests in flight, staggered by ``ceil(d / n)`` ticks, on ``n`` worker
  threads (``AsyncEngineCfg.max_in_flight``, ``ThreadedInference(workers=n)``): a server with ``n`` model replicas,
  each with latency ``L``.

Metrics (per run; medians over target jumps):

* reaction (s): from the target jump (the first tick whose observation holds the new target) to the first tick
  whose executed action comes from a chunk computed from an observation that holds the new target.
* completion (s) / success: from the jump until the end effector is within ``--success_cm`` (default 2 cm, the
  task's radius) of the target (success: reached before the next jump); final distance: median distance when
  the next jump comes.
* boundary jump / within-chunk step: mean ``max_j |a_k - a_{k-1}|`` over ticks where a newer chunk takes over,
  and over ticks that continue the same chunk; ``jump ratio`` = boundary / within.
* lateness p99 / max (ms) of tick starts after their deadlines and missed deadlines (> one period late), with
  inference running on the worker thread.
* stall fraction: ticks without a planned action (the arm holds), after the first chunk.

Usage (see docs/benchmarks.md for the training commands of the two policies)::

    python benchmarks/async_inference.py --plain plain.onnx --vlash vlash.onnx
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, print_machine_info, write_results  # noqa: E402

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg  # noqa: E402
from rslkit.deploy.clock import MonotonicClock, set_realtime_priority  # noqa: E402
from rslkit.deploy.future_state import ConditionedObservation, FutureStateConditioner  # noqa: E402
from rslkit.deploy.inference_worker import InferenceRequest, InferenceResult, ThreadedInference  # noqa: E402
from rslkit.deploy.onnx_policy import OnnxPolicy  # noqa: E402
from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask  # noqa: E402

RATE = 50.0
TARGET = slice(13, 16)  # target position inside the 24-dim observation
MODES = ("sync", "naive", "vlash", "delay")


class SimArm:
    """One SO-101 reach env driven tick by tick; the target jumps to ``targets[i]`` at tick ``i * segment``."""

    def __init__(self, targets: np.ndarray, segment_ticks: int, seed: int) -> None:
        cfg = SO101ReachCfg(num_envs=1, episode_length=10**9, sim_threads=1, init_noise=0.0, seed=seed)
        self.task = SO101ReachTask(cfg, "cpu")
        self.targets, self.segment = targets, segment_ticks
        self.jump_ticks: list[int] = []
        self.distance: list[float] = []
        self._set_target(0, tick=0)
        self._obs = self.task.get_observations()["policy"][0].numpy().copy()
        self._action: np.ndarray | None = None

    def _set_target(self, index: int, tick: int) -> None:
        self.task.target[0] = torch.from_numpy(self.targets[index])
        self.jump_ticks.append(tick)

    def observe(self) -> np.ndarray:
        return self._obs

    def act(self, action: np.ndarray) -> None:
        self._action = np.asarray(action, np.float32)

    def advance(self, tick: int, action: np.ndarray | None) -> None:
        """Physics for one tick (after the engine's tick); the arm holds its pose before the first action."""
        hold = self._obs[:5] if self._action is None else self._action
        obs, _, _, _ = self.task.step(torch.from_numpy(np.asarray(hold, np.float32)).unsqueeze(0))
        self.distance.append(float(self.task.distance()[0]))
        next_tick = tick + 1
        index = next_tick // self.segment
        if next_tick % self.segment == 0 and index < len(self.targets):
            self._set_target(index, next_tick)
            obs = self.task.get_observations()
        self._obs = obs["policy"][0].numpy().copy()


class LatentInference:
    """``ThreadedInference`` (``workers`` threads) of an ONNX chunk policy with injected latency per request;
    remembers the target each request saw."""

    def __init__(
        self,
        policy: OnnxPolicy,
        clock: MonotonicClock,
        latency_s: float,
        seed: int,
        zero_noise: bool,
        rt_priority: int | None = None,
        workers: int = 1,
    ) -> None:
        self.policy, self.latency_s = policy, latency_s
        shape = policy.meta.noise_shape or [1]
        self.noise = np.zeros(shape, np.float32) if zero_noise else None
        self.rng = np.random.default_rng(seed)
        self.target_of: dict[int, np.ndarray] = {}
        self.worker = ThreadedInference(self._chunk, clock, rt_priority, workers)

    def _chunk(self, timed: tuple[float, Any]) -> np.ndarray:
        deadline, obs = timed
        chunk = self.policy(obs, self.noise)
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return chunk

    @property
    def busy(self) -> bool:
        return self.worker.busy

    def submit(self, request: InferenceRequest) -> None:
        obs = request.obs.obs if isinstance(request.obs, ConditionedObservation) else request.obs
        self.target_of[request.request_id] = np.asarray(obs)[TARGET].copy()
        deadline = time.perf_counter() + self.latency_s * self.rng.uniform(0.9, 1.1)
        self.worker.submit(dataclasses.replace(request, obs=(deadline, request.obs)))

    def poll(self) -> InferenceResult | None:
        return self.worker.poll()

    def close(self) -> None:
        self.worker.close()


def run(
    mode: str,
    policy: OnnxPolicy,
    latency_s: float,
    targets: np.ndarray,
    segment_s: float,
    seed: int,
    rt_priority: int | None = None,
    zero_noise: bool = True,
    success_radius: float = 0.02,
    worker_rt_priority: int | None = None,
) -> dict:
    """One run of ``len(targets)`` target segments (control thread under ``SCHED_FIFO`` at ``rt_priority``, the
    inference workers at ``worker_rt_priority``, if given); returns metrics and the executed trace."""
    base, in_flight = parse_mode(mode)
    segment = round(segment_s * RATE)
    arm, clock = SimArm(targets, segment, seed), MonotonicClock()
    inference = LatentInference(policy, clock, latency_s, seed, zero_noise, worker_rt_priority, in_flight)
    horizon = int(policy.chunk_length or 1)
    cfg = AsyncEngineCfg(
        rate_hz=RATE,
        sync=base == "sync",
        chunk_start="observation" if base == "naive" else "delay",
        request_margin=horizon,  # async modes re-plan whenever a worker is idle
        initial_latency_s=1.1 * latency_s,
        latency_warmup=2,
        max_in_flight=in_flight,
    )
    conditioner = FutureStateConditioner.for_policy(policy.meta, "absolute") if base == "vlash" else None
    engine = AsyncChunkEngine(arm, inference, clock, cfg, conditioner, tick_hook=arm.advance)
    previous = set_realtime_priority(rt_priority) if rt_priority else None  # this (control) thread only
    try:
        engine.run(segment * len(targets))
    finally:
        if previous is not None:
            set_realtime_priority(None)
        inference.close()
    return {**_metrics(engine, arm, inference, segment, success_radius), "trace": _trace(engine, arm)}


def parse_mode(mode: str) -> tuple[str, int]:
    """``"vlash@3"`` -> ``("vlash", 3)``; ``"sync"`` -> ``("sync", 1)``.

    Raises:
        ValueError: for an unknown mode, ``n < 1``, or ``sync@n`` with ``n > 1``.
    """
    base, _, n = mode.partition("@")
    if base not in MODES:
        raise ValueError(f"Unknown mode '{mode}'; use one of {MODES}, optionally with '@n' (n requests in flight).")
    try:
        count = int(n) if n else 1
    except ValueError:
        raise ValueError(f"Mode '{mode}': the part after '@' must be an integer.") from None
    if count < 1 or (base == "sync" and count > 1):
        raise ValueError(f"Mode '{mode}': n must be >= 1, and 1 for sync.")
    return base, count


def _metrics(
    engine: AsyncChunkEngine, arm: SimArm, inference: LatentInference, segment: int, success_radius: float
) -> dict[str, float]:
    executed, chunks = engine.executed, engine.executed_chunks
    reactions, completions, successes, final_distances = [], [], [], []
    for i, jump in enumerate(arm.jump_ticks[1:], start=1):
        target = arm.targets[i]
        end = min(jump + segment, len(executed))
        react = next(
            (
                t
                for t in range(jump, end)
                if chunks[t] is not None and np.allclose(inference.target_of[chunks[t]], target)
            ),
            None,
        )
        reactions.append((react - jump) / RATE if react is not None else float("nan"))
        # arm.distance[t] is measured after tick t's physics step
        reached = next((t for t in range(jump, end) if arm.distance[t] < success_radius), None)
        final_distances.append(arm.distance[end - 1])
        successes.append(reached is not None)
        completions.append((reached + 1 - jump) / RATE if reached is not None else float("nan"))
    boundary, within = [], []
    for t in range(1, len(executed)):
        a, b = executed[t - 1], executed[t]
        if a is None or b is None or chunks[t] is None:
            continue  # startup, or a held action (stall)
        step = float(np.abs(b - a).max())
        # a new chunk takes over from the previous tick's action (for sync: the action held while it waited)
        (within if chunks[t] == chunks[t - 1] else boundary).append(step)
    stats = engine.stats.summary()
    boundary_mean = float(np.mean(boundary)) if boundary else float("nan")
    within_mean = float(np.mean(within)) if within else float("nan")
    return {
        "reaction_s": float(np.nanmedian(reactions)),
        "reaction_max_s": float(np.nanmax(reactions)),
        "completion_s": float(np.nanmedian(completions)) if any(successes) else float("nan"),
        "success": float(np.mean(successes)),
        "final_distance_cm": 100 * float(np.median(final_distances)),
        "boundary_jump": boundary_mean,
        "within_step": within_mean,
        "jump_ratio": boundary_mean / within_mean if within else float("nan"),
        "lateness_p99_ms": stats["lateness_p99_ms"],
        "lateness_max_ms": stats["lateness_max_ms"],
        "missed_deadlines": stats["missed_deadlines"],
        "stall_fraction": stats["stall_fraction"],
        "chunks": stats["chunks"],
        "stale_actions": stats["stale_actions"],
        "superseded": stats["superseded"],
        "latency_p50_ms": stats["latency_p50_ms"],
    }


def _trace(engine: AsyncChunkEngine, arm: SimArm) -> dict[str, list]:
    """Executed actions and their chunk ids around the second target jump (for the plot)."""
    jump = arm.jump_ticks[min(2, len(arm.jump_ticks) - 1)]
    lo, hi = max(0, jump - 25), min(len(engine.executed), jump + 50)
    return {
        "jump_tick": jump,
        "ticks": list(range(lo, hi)),
        "actions": [None if a is None else [float(x) for x in a] for a in engine.executed[lo:hi]],
        "chunks": engine.executed_chunks[lo:hi],
    }


def reachable_targets(count: int, seed: int) -> np.ndarray:
    """``[count, 3]`` end-effector targets sampled by the task itself (reachable, above the minimum height)."""
    task = SO101ReachTask(SO101ReachCfg(num_envs=count, sim_threads=1, seed=seed), "cpu")
    return task.target.numpy().astype(np.float32).copy()


def plot(rows: list[dict], latency_s: float, path: Path) -> None:
    """Executed shoulder-lift targets around a target jump for each mode at ``latency_s`` (chunk starts marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    picked = [r for r in rows if r["latency_s"] == latency_s and r["rep"] == 0]
    fig, axes = plt.subplots(len(picked), 1, figsize=(7.0, 1.45 * len(picked) + 0.6), sharex=True, dpi=72)
    for ax, row in zip(np.atleast_1d(axes), picked):
        tr = row["trace"]
        t = (np.asarray(tr["ticks"]) - tr["jump_tick"]) / RATE
        y = np.array([np.nan if a is None else a[1] for a in tr["actions"]])
        ax.plot(t, y, ".-", ms=3, lw=0.8)
        starts = [i for i in range(1, len(t)) if tr["chunks"][i] is not None and tr["chunks"][i] != tr["chunks"][i - 1]]
        ax.plot(t[starts], y[starts], "o", mfc="none", mec="C3", ms=5, label="first action of a new chunk")
        ax.axvline(0.0, color="k", lw=0.8, ls="--")
        ax.set_ylabel(row["mode"], fontsize=8)
        ax.tick_params(labelsize=7)
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper right")
    np.atleast_1d(axes)[0].set_title(
        f"SO-101 shoulder-lift target (normalized), injected latency {latency_s * 1e3:.0f} ms; dashed: target jump",
        fontsize=8,
    )
    np.atleast_1d(axes)[-1].set_xlabel("time after the target jump (s)", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", required=True, help="ONNX flow chunk policy trained without offsets")
    parser.add_argument("--vlash", required=True, help="ONNX flow chunk policy trained with future-state offsets")
    parser.add_argument("--latencies_ms", default="50,100,200,300")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--jumps", type=int, default=6, help="target jumps per run")
    parser.add_argument("--segment_s", type=float, default=2.0, help="seconds between target jumps")
    parser.add_argument("--reps", type=int, default=1, help="repetitions (each with new targets)")
    parser.add_argument("--rt_priority", type=int, default=0, help="SCHED_FIFO priority of the control loop (0: off)")
    parser.add_argument(
        "--worker_rt_priority", type=int, default=0, help="SCHED_FIFO priority of the inference worker (0: off)"
    )
    parser.add_argument("--success_cm", type=float, default=2.0, help="reached: end effector this close (cm)")
    parser.add_argument("--noise", choices=("zeros", "random"), default="zeros", help="initial flow noise")
    parser.add_argument("--plot_latency_ms", type=float, default=100.0)
    parser.add_argument("--plot", default="docs/img/async_boundary.png")
    parser.add_argument("--out", default=None, help="JSON results (default benchmarks/results/async_inference.json)")
    args = parser.parse_args(argv)
    logging.getLogger("rslkit.deploy.async_engine").setLevel(logging.ERROR)  # stalls are measured, not logged
    info = machine_info(["onnxruntime", "mujoco", "numpy"])
    print_machine_info(info)
    policies = {"plain": OnnxPolicy(args.plain, seed=0), "vlash": OnnxPolicy(args.vlash, seed=0)}
    latencies = [float(x) / 1e3 for x in args.latencies_ms.split(",")]
    modes = args.modes.split(",")
    for mode in modes:
        try:
            parse_mode(mode)
        except ValueError as err:
            parser.error(str(err))
    rows = []
    header = "| latency | mode | reaction (s) | completion (s) | success | boundary / within step | ratio | "
    header += "lateness p99 / max (ms) | missed | stall |"
    print(header + "\n" + "|---" * (header.count("|") - 1) + "|")
    for rep in range(args.reps):  # interleaved: every mode at every latency within a repetition
        targets = reachable_targets(args.jumps + 1, seed=100 + rep)
        for latency_s in latencies:
            for mode in modes:
                policy = policies["vlash" if parse_mode(mode)[0] == "vlash" else "plain"]
                zeros, rt = args.noise == "zeros", args.rt_priority or None
                res = run(
                    mode, policy, latency_s, targets, args.segment_s, rep, rt, zeros, args.success_cm / 100,
                    args.worker_rt_priority or None,
                )  # fmt: skip
                rows.append({"rep": rep, "latency_s": latency_s, "mode": mode, **res})
                print(
                    f"| {latency_s * 1e3:.0f} ms | {mode} | {res['reaction_s']:.2f} | {res['completion_s']:.2f} "
                    f"| {res['success']:.2f} ({res['final_distance_cm']:.1f} cm) "
                    f"| {res['boundary_jump']:.3f} / {res['within_step']:.3f} "
                    f"| {res['jump_ratio']:.1f} | {res['lateness_p99_ms']:.1f} / {res['lateness_max_ms']:.1f} "
                    f"| {res['missed_deadlines']:.0f} | {res['stall_fraction']:.2f} |",
                    flush=True,
                )
    plot(rows, args.plot_latency_ms / 1e3, Path(args.plot))
    payload = {
        "machine": info,
        "args": vars(args),
        "rows": [{k: v for k, v in r.items() if k != "trace"} for r in rows],
        "traces": [  # around one target jump, at the plotted latency
            {"rep": r["rep"], "latency_s": r["latency_s"], "mode": r["mode"], **r["trace"]}
            for r in rows
            if r["latency_s"] == args.plot_latency_ms / 1e3
        ],
    }
    print(f"results: {write_results('async_inference', payload, args.out)}; plot: {args.plot}")


if __name__ == "__main__":
    main()
