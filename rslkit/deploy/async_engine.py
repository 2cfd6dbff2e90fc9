"""Asynchronous action-chunk execution (VLASH-style): a fixed-rate control loop with absolute deadlines that
executes actions from a tick-indexed timeline while the next chunk is inferred off the control thread.

Per tick ``k`` (deadline ``t0 + k / rate``): merge finished chunks, observe, execute the planned action of tick
``k`` (or apply the starvation policy), then, when fewer actions remain than the estimated inference delay ``d``
(ticks, p95 of measured latency) plus a margin, request the next chunk. With ``chunk_start="delay"`` (VLASH) the
request conditions on the state rolled forward through the ``d`` actions of ticks ``k .. k+d-1`` and its first
action belongs to tick ``k + d``; with ``chunk_start="observation"`` (naive async) it belongs to tick ``k`` and the
actions whose time has passed on arrival are dropped.

With ``max_in_flight = n > 1`` up to ``n`` requests overlap, started at least ``ceil(d / n)`` ticks apart, so a
new observation reaches the policy every ``~L / n`` instead of every ``L``: reaction to a change drops from
``~1.5 L`` to ``~(1 + 1 / 2n) L``. It needs an inference backend with that many workers and the throughput to
match (``ThreadedInference(workers=n)``: several model replicas or accelerators, or latency dominated by
transport). Results are merged as they arrive; one that arrives after a newer request's chunk is dropped
(``EngineStats.superseded``). A VLASH request rolls the state forward through the planned timeline, which does not
yet hold the chunks still in flight.

Observations are whatever the policy takes: one array, or a ``{group: array}`` mapping such as a VLA policy's state,
uint8 ``camera_<name>`` images and instruction (text or embedding). VLASH future state rolls only the state forward
(:class:`~rslkit.deploy.future_state.FutureStateConditioner`); images and the instruction go to the policy as
observed. ``validate`` (e.g. :meth:`OnnxPolicy.check_inputs <rslkit.deploy.onnx_policy.OnnxPolicy.check_inputs>`)
checks each observation on the control thread before it is requested, so a missing camera or a wrong image size
raises there, at the tick that observed it, rather than as a failed chunk later.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from rslkit.deploy.clock import Clock
from rslkit.deploy.future_state import FutureStateConditioner
from rslkit.deploy.inference_worker import InferenceRequest, InferenceResult
from rslkit.deploy.latency import LatencyEstimator
from rslkit.deploy.timeline import ActionTimeline, MergeMode

log = logging.getLogger(__name__)


class Robot(Protocol):
    """What the engine drives: a real robot, a ROS 2 bridge or a simulator."""

    def observe(self) -> Any:
        """Latest observation (what the policy takes)."""
        ...

    def act(self, action: np.ndarray) -> None:
        """Send one action ``[A]``."""
        ...


class Inference(Protocol):
    """:class:`~rslkit.deploy.inference_worker.ThreadedInference` or ``SimulatedInference``."""

    @property
    def busy(self) -> bool:
        """True while no further request can be submitted."""
        ...

    def submit(self, request: InferenceRequest) -> None: ...

    def poll(self) -> InferenceResult | None: ...


@dataclass
class AsyncEngineCfg:
    """Control-loop settings."""

    rate_hz: float = 50.0
    merge: MergeMode = "replace"
    """``replace`` (VLASH), ``blend`` (LeRobot), ``ensemble`` (ACT); see ``ActionTimeline``."""
    blend_weight: float = 0.7
    ensemble_m: float = 0.01
    chunk_start: Literal["delay", "observation"] = "delay"
    """``delay``: a chunk starts ``d`` ticks after its observation (VLASH); ``observation``: at it (naive async)."""
    request_margin: int = 1
    """Extra ticks of planned actions left when the next chunk is requested."""
    initial_latency_s: float = 0.1
    """Latency assumed until measurements replace it."""
    latency_warmup: int = 3
    latency_quantile: float = 0.95
    starvation: Literal["hold", "stop"] = "hold"
    """No planned action: repeat the last action (``hold``) or end the run (``stop``)."""
    sync: bool = False
    """Request only once no action is planned for the current tick (synchronous execution: the robot holds the
    last action while it waits, and the chunk starts when it arrives)."""
    max_missed_deadlines: int | None = None
    """End the run after this many late ticks (None: never)."""
    max_in_flight: int = 1
    """Async: requests computed at once, staggered by ``ceil(d / max_in_flight)`` ticks (see the module doc); the
    inference backend needs as many workers."""


@dataclass
class EngineStats:
    """What a run measured."""

    ticks: int = 0
    startup_ticks: int = 0
    """Ticks before the first chunk arrived (holding; not starvation)."""
    starved_ticks: int = 0
    starved_at: list[int] = field(default_factory=list)
    """Ticks that had no planned action (after the first chunk)."""
    missed_deadlines: int = 0
    """Ticks that started more than one period after their deadline."""
    lateness_s: list[float] = field(default_factory=list)
    requests: int = 0
    chunks: int = 0
    stale_actions: int = 0
    """Actions of arriving chunks whose tick had passed (dropped)."""
    superseded: int = 0
    """Chunks that arrived after a newer request's chunk (dropped)."""
    latencies_s: list[float] = field(default_factory=list)
    delay_ticks: list[int] = field(default_factory=list)
    """The delay estimate of each request."""
    request_ticks: list[int] = field(default_factory=list)
    """The tick of each request."""
    boundary_jumps: list[float] = field(default_factory=list)
    """``max |a_k - a_{k-1}|`` at ticks whose action came from a newer chunk than the previous tick's."""
    stopped: str | None = None
    """Why the run ended early (None: it ran all ticks)."""

    def summary(self) -> dict[str, float]:
        """Scalars: counts, lateness p99 / max (ms), latency p50 / p95 (ms), mean boundary jump."""
        late = np.asarray(self.lateness_s) * 1e3 if self.lateness_s else np.zeros(1)
        lat = np.asarray(self.latencies_s) * 1e3 if self.latencies_s else np.full(1, np.nan)
        return {
            "ticks": float(self.ticks),
            "startup_ticks": float(self.startup_ticks),
            "starved_ticks": float(self.starved_ticks),
            "stall_fraction": self.starved_ticks / max(1, self.ticks - self.startup_ticks),
            "missed_deadlines": float(self.missed_deadlines),
            "lateness_p99_ms": float(np.percentile(late, 99)),
            "lateness_max_ms": float(late.max()),
            "chunks": float(self.chunks),
            "stale_actions": float(self.stale_actions),
            "superseded": float(self.superseded),
            "latency_p50_ms": float(np.percentile(lat, 50)),
            "latency_p95_ms": float(np.percentile(lat, 95)),
            "boundary_jump_mean": float(np.mean(self.boundary_jumps)) if self.boundary_jumps else 0.0,
        }


class AsyncChunkEngine:
    """Executes a chunk policy on a robot at ``cfg.rate_hz`` with inference overlapped with execution.

    Args:
        robot: observation source and action sink.
        inference: where chunks are computed (a worker thread, or simulated with scripted latency).
        clock: the loop's clock (:class:`~rslkit.deploy.clock.FakeClock` in tests).
        cfg: settings.
        conditioner: VLASH future-state conditioning of the request's observation (None: as observed). A
            :class:`~rslkit.deploy.future_state.FutureStateConditioner` with ``max_offset`` makes the engine refuse
            (``ValueError``, at construction and at each request) a delay of more ticks than the policy was trained
            with.
        tick_hook: called after each tick with ``(tick, action or None)`` (simulators advance here).
        validate: called with each observation before it is requested (on the control thread); raises
            ``ValueError`` for one the policy cannot take (None: no check).
    """

    def __init__(
        self,
        robot: Robot,
        inference: Inference,
        clock: Clock,
        cfg: AsyncEngineCfg | None = None,
        conditioner: FutureStateConditioner | None = None,
        tick_hook: Callable[[int, np.ndarray | None], None] | None = None,
        validate: Callable[[Any], None] | None = None,
    ) -> None:
        self.cfg = cfg = cfg or AsyncEngineCfg()
        if cfg.rate_hz <= 0:
            raise ValueError(f"rate_hz must be > 0, got {cfg.rate_hz}.")
        if cfg.request_margin < 0:
            raise ValueError(f"request_margin must be >= 0, got {cfg.request_margin}.")
        if cfg.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {cfg.max_in_flight}.")
        self.robot, self.inference, self.clock = robot, inference, clock
        self.conditioner, self.tick_hook, self.validate = conditioner, tick_hook, validate
        self.period = 1.0 / cfg.rate_hz
        self.timeline = ActionTimeline(cfg.merge, cfg.blend_weight, cfg.ensemble_m)
        self.latency = LatencyEstimator(cfg.initial_latency_s, cfg.latency_warmup, cfg.latency_quantile)
        if conditioner is not None and cfg.chunk_start == "delay" and not cfg.sync:
            check = getattr(conditioner, "check_offset", None)
            if check is not None:
                check(self.latency.delay_ticks(self.period))  # refuse before the robot moves
        self.stats = EngineStats()
        self.executed: list[np.ndarray | None] = []
        """Action sent at each tick (None: nothing sent before the first chunk)."""
        self.executed_chunks: list[int | None] = []
        """Request id of the chunk that planned each tick's action (None: startup or starved)."""
        self._last_action: np.ndarray | None = None
        self._last_chunk = -1
        self._next_id = 0
        self._in_flight = 0
        self._last_request_tick: int | None = None
        self._newest_merged = -1

    # ------------------------------------------------------------------ pieces of a tick
    def _merge(self, result: InferenceResult, tick: int) -> None:
        self._in_flight -= 1
        if result.error is not None:
            raise RuntimeError(f"Chunk inference failed: {result.error!r}") from result.error
        assert result.chunk is not None
        chunk = np.asarray(result.chunk)
        if chunk.ndim == 3 and chunk.shape[0] == 1:
            chunk = chunk[0]
        self.latency.record(result.latency_s)
        self.stats.latencies_s.append(result.latency_s)
        if result.request.request_id < self._newest_merged:  # a newer observation's chunk is already planned
            self.stats.superseded += 1
            return
        self._newest_merged = result.request.request_id
        self.stats.chunks += 1
        start = result.request.start if not self.cfg.sync else tick
        self.stats.stale_actions += self.timeline.merge(chunk, start, tick, result.request.request_id)

    def _request(self, obs: Any, tick: int) -> None:
        if self.validate is not None:
            self.validate(obs)
        d = self.latency.delay_ticks(self.period)
        start = tick + d if self.cfg.chunk_start == "delay" and not self.cfg.sync else tick
        if self.conditioner is not None and start > tick:
            check = getattr(self.conditioner, "check_offset", None)
            if check is not None:
                check(start - tick)  # a policy trained with offsets up to D refuses a longer overlap
            pending = self.timeline.planned(tick, start)
            obs = self.conditioner(obs, pending if pending is not None else np.zeros((0, 0)))
        self.inference.submit(InferenceRequest(obs, tick, start, self._next_id))
        self._next_id += 1
        self._in_flight += 1
        self._last_request_tick = tick
        self.stats.requests += 1
        self.stats.delay_ticks.append(d)
        self.stats.request_ticks.append(tick)

    def _wants_chunk(self, tick: int, have_action: bool) -> bool:
        if self.inference.busy:
            return False
        if self.cfg.sync:  # observe, infer, then act: request once the plan has run out
            return self._in_flight == 0 and not have_action
        d = self.latency.delay_ticks(self.period)
        if self._in_flight >= self.cfg.max_in_flight:
            return False
        if self._in_flight > 0:  # stagger overlapping requests over the latency
            assert self._last_request_tick is not None
            if tick - self._last_request_tick < math.ceil(d / self.cfg.max_in_flight):
                return False
        if not have_action:
            return True
        return self.timeline.remaining_after(tick) <= d - 1 + self.cfg.request_margin

    def step(self, tick: int) -> np.ndarray | None:
        """One control tick: merge, observe, act, maybe request. Returns the action sent (None: none yet).

        Raises:
            RuntimeError: when inference failed.
            ValueError: when ``validate`` refuses the observation to be requested (the tick's action was sent).
        """
        while (result := self.inference.poll()) is not None:
            self._merge(result, tick)
        obs = self.robot.observe()
        planned = self.timeline.action(tick)
        if planned is not None:
            action, chunk_id = planned
            if chunk_id != self._last_chunk and self._last_action is not None:
                self.stats.boundary_jumps.append(float(np.abs(action - self._last_action).max()))
            self._last_chunk = chunk_id
        elif self._last_action is None:
            self.stats.startup_ticks += 1
            action = None
        else:
            self.stats.starved_ticks += 1
            self.stats.starved_at.append(tick)
            first_or_100th = self.stats.starved_ticks == 1 or self.stats.starved_ticks % 100 == 0
            if first_or_100th and not self.cfg.sync:  # a synchronous loop waits by design
                log.warning(
                    "Action timeline starved at tick %d (%d starved ticks so far, policy '%s'); inference is slower "
                    "than the chunk lasts: raise request_margin or shorten inference.",
                    tick,
                    self.stats.starved_ticks,
                    self.cfg.starvation,
                )
            if self.cfg.starvation == "stop":
                self.stats.stopped = f"starved at tick {tick}"
                return None
            action = self._last_action
        if action is not None:
            self.robot.act(action)
            self._last_action = action
        self.executed.append(action)
        self.executed_chunks.append(planned[1] if planned is not None else None)
        if self._wants_chunk(tick, planned is not None):
            self._request(obs, tick)
        self.timeline.drop_before(tick + 1)
        return action

    # ------------------------------------------------------------------ loop
    def run(self, num_ticks: int, until: Callable[[], bool] | None = None) -> EngineStats:
        """Run ``num_ticks`` ticks at absolute deadlines ``t0 + k * period`` (late ticks run at once and count),
        or fewer when ``until()`` turns true after a tick (e.g. the task is done).

        Returns:
            The run's :class:`EngineStats` (``stopped`` says why it ended early).
        """
        t0 = self.clock.now()
        for k in range(num_ticks):
            deadline = t0 + k * self.period
            self.clock.sleep_until(deadline)
            lateness = self.clock.now() - deadline
            self.stats.lateness_s.append(lateness)
            if lateness > self.period:
                self.stats.missed_deadlines += 1
                limit = self.cfg.max_missed_deadlines
                if limit is not None and self.stats.missed_deadlines > limit:
                    self.stats.stopped = f"{self.stats.missed_deadlines} missed deadlines at tick {k}"
                    break
            self.stats.ticks += 1
            action = self.step(k)
            if self.stats.stopped is not None:
                break
            if self.tick_hook is not None:
                self.tick_hook(k, action)
            if until is not None and until():
                break
        return self.stats
