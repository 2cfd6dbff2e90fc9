"""The asynchronous chunk engine on a fake clock: deadlines, early requests, VLASH conditioning, starvation."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg
from rslkit.deploy.clock import FakeClock, MonotonicClock
from rslkit.deploy.future_state import FutureStateConditioner
from rslkit.deploy.inference_worker import SimulatedInference, ThreadedInference

RATE = 50.0  # 20 ms ticks
H = 8


class TrackingRobot:
    """Joint that reaches each absolute target in one tick: state = last action."""

    def __init__(
        self, clock: FakeClock | None = None, slow_tick: int | None = None, overrun_periods: float = 0.0
    ) -> None:
        self.state = np.zeros(1, np.float32)
        self.clock, self.slow_tick, self.overrun, self.acts = clock, slow_tick, overrun_periods, 0

    def observe(self) -> np.ndarray:
        return self.state.copy()

    def act(self, action: np.ndarray) -> None:
        self.state = np.asarray(action, np.float32).copy()
        self.acts += 1
        if self.clock is not None and self.acts == self.slow_tick:
            self.clock.advance(self.overrun / RATE)  # this tick's work overran its period


def ramp_policy(obs: np.ndarray) -> np.ndarray:
    """Chunk continuing a +1 ramp from the observed state: ``[s + 1, ..., s + H]``."""
    return (obs[0] + np.arange(1, H + 1, dtype=np.float32)).reshape(H, 1)


def _engine(latency_s, cfg: AsyncEngineCfg, conditioner=None, robot=None, clock=None):
    clock = clock or FakeClock()
    robot = robot or TrackingRobot()
    latency = latency_s if callable(latency_s) else (lambda request: latency_s)
    inference = SimulatedInference(ramp_policy, clock, latency)
    return AsyncChunkEngine(robot, inference, clock, cfg, conditioner), robot


def _actions(engine) -> np.ndarray:
    return np.array([a[0] for a in engine.executed if a is not None])


def test_vlash_conditioning_executes_a_seamless_ramp():
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05, merge="replace", chunk_start="delay")
    engine, _ = _engine(0.05, cfg, FutureStateConditioner("absolute", slice(0, 1)))
    stats = engine.run(100)
    assert stats.startup_ticks == 3  # 50 ms latency at 20 ms ticks: the first chunk serves tick 3
    assert stats.starved_ticks == 0 and stats.stale_actions == 0 and stats.missed_deadlines == 0
    np.testing.assert_array_equal(_actions(engine), np.arange(1, 98))  # every action continues the last
    assert stats.chunks >= 13 and set(stats.delay_ticks) == {3}
    assert max(stats.boundary_jumps) == 1.0


def test_without_future_state_the_delayed_chunk_jumps_back():
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05, chunk_start="delay")
    engine, _ = _engine(0.05, cfg, conditioner=None)
    stats = engine.run(60)
    assert stats.starved_ticks == 0
    assert min(np.diff(_actions(engine))) < 0  # conditioned on a stale state, the new chunk restarts lower


def test_naive_async_drops_stale_actions_and_sync_stalls():
    naive = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05, chunk_start="observation")
    engine, _ = _engine(0.05, naive)
    stats = engine.run(60)
    assert stats.stale_actions > 0 and stats.starved_ticks == 0
    sync = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05, sync=True)
    engine, _ = _engine(0.05, sync)
    stats = engine.run(60)
    # each chunk: 8 actions, then 3 held ticks waiting for the next one (requested once the plan ran out)
    assert stats.starved_ticks == 3 * (stats.chunks - 1) and stats.summary()["stall_fraction"] > 0.2
    np.testing.assert_array_equal(np.unique(_actions(engine)), np.arange(1, _actions(engine).max() + 1))


@pytest.mark.parametrize("merge", ["blend", "ensemble"])
def test_other_merge_modes_run_without_starvation(merge):
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05, merge=merge, request_margin=2)
    engine, _ = _engine(0.05, cfg, FutureStateConditioner("absolute", slice(0, 1)))
    stats = engine.run(80)
    assert stats.starved_ticks == 0 and stats.chunks > 5
    assert np.all(np.diff(_actions(engine)) > 0)


def test_request_early_enough_with_measured_latency():
    # two slow warm-up requests (excluded), then 70 ms -> 4 ticks; the initial guess of 20 ms is too low
    latencies = iter([0.3, 0.3] + [0.07] * 100)
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.02, latency_warmup=2)
    engine, _ = _engine(lambda request: next(latencies), cfg, FutureStateConditioner("absolute", slice(0, 1)))
    stats = engine.run(200)
    assert stats.delay_ticks[0] == 1 and stats.delay_ticks[-1] == 4
    assert 0 < stats.starved_ticks and max(stats.starved_at) < 80  # starves only until the estimate is measured
    assert np.all(np.diff(_actions(engine)[-100:]) == 1)


def test_starvation_hold_and_stop(caplog):
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.01, latency_warmup=0, request_margin=0)
    with caplog.at_level(logging.WARNING, logger="rslkit.deploy.async_engine"):
        engine, robot = _engine(0.3, cfg)  # 15 ticks of latency, 8-action chunks: must starve
        stats = engine.run(80)
    assert stats.starved_ticks > 0 and "starved" in caplog.text
    held = [i for i in range(1, len(engine.executed)) if engine.executed[i] is engine.executed[i - 1]]
    assert len(held) >= stats.starved_ticks
    stop = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.01, latency_warmup=0, request_margin=0, starvation="stop")
    engine, _ = _engine(0.3, stop)
    stats = engine.run(80)
    assert stats.stopped is not None and "starved" in stats.stopped and stats.ticks < 80


def test_absolute_deadlines_count_a_late_tick_and_recover():
    clock = FakeClock(start=100.0)
    robot = TrackingRobot(clock, slow_tick=10, overrun_periods=1.5)
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05)
    engine, _ = _engine(0.05, cfg, FutureStateConditioner("absolute", slice(0, 1)), robot, clock)
    stats = engine.run(40)
    assert stats.missed_deadlines == 0  # 1.5 periods of overrun makes the next tick 0.5 period late
    late = np.flatnonzero(np.asarray(stats.lateness_s) > 1e-9)
    assert late.tolist() == [13]  # the 10th action is sent at tick 12; tick 14 is back on the absolute schedule
    assert clock.now() == pytest.approx(100.0 + 39 / RATE)


def test_missed_deadlines_are_counted_and_can_end_the_run():
    clock = FakeClock()
    robot = TrackingRobot(clock, slow_tick=5, overrun_periods=3.5)
    engine, _ = _engine(0.05, AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05), robot=robot, clock=clock)
    assert engine.run(30).missed_deadlines == 2  # 2.5 and 1.5 periods late, then 0.5, then on time
    clock = FakeClock()
    robot = TrackingRobot(clock, slow_tick=5, overrun_periods=3.5)
    cfg = AsyncEngineCfg(rate_hz=RATE, initial_latency_s=0.05, max_missed_deadlines=0)
    stats = _engine(0.05, cfg, robot=robot, clock=clock)[0].run(30)
    assert stats.stopped is not None and "missed deadlines" in stats.stopped and stats.ticks < 30


def test_threaded_inference_in_real_time():
    clock = MonotonicClock()

    def slow_policy(obs):
        time.sleep(0.012)
        return ramp_policy(obs)

    inference = ThreadedInference(slow_policy, clock)
    cfg = AsyncEngineCfg(rate_hz=100.0, initial_latency_s=0.015, request_margin=2)
    robot = TrackingRobot()
    engine = AsyncChunkEngine(robot, inference, clock, cfg, FutureStateConditioner("absolute", slice(0, 1)))
    try:
        stats = engine.run(60)
    finally:
        inference.close()
    assert stats.chunks >= 5 and stats.ticks == 60
    assert 0.010 < np.median(stats.latencies_s) < 0.2
    summary = stats.summary()
    assert summary["latency_p50_ms"] > 10 and summary["stall_fraction"] < 0.5


def test_inference_errors_surface_on_the_control_thread():
    clock = FakeClock()

    def broken(obs):
        raise RuntimeError("session died")

    inference = ThreadedInference(broken, clock)
    engine = AsyncChunkEngine(TrackingRobot(), inference, clock, AsyncEngineCfg(rate_hz=RATE))
    engine.step(0)
    deadline = time.perf_counter() + 5
    with pytest.raises(RuntimeError, match="Chunk inference failed.*session died"):
        while time.perf_counter() < deadline:
            engine.step(1)
            time.sleep(0.001)
    inference.close()


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getscheduler"), reason="Linux scheduling API")
def test_worker_thread_real_time_priority_applies_to_the_worker_only():
    import os

    clock = MonotonicClock()
    try:
        inference = ThreadedInference(ramp_policy, clock, rt_priority=10)
    except PermissionError:
        pytest.skip("this process may not use SCHED_FIFO")
    try:
        assert inference.native_id is not None
        assert os.sched_getscheduler(inference.native_id) == os.SCHED_FIFO
        assert os.sched_getparam(inference.native_id).sched_priority == 10
        assert os.sched_getscheduler(0) != os.SCHED_FIFO  # the calling thread is untouched
    finally:
        inference.close()
    with pytest.raises(ValueError, match="1-99"):
        ThreadedInference(ramp_policy, clock, rt_priority=0)


class StepRobot:
    """Observation ``[0]`` until tick ``switch``, then ``[1]``; the engine's tick hook advances it."""

    def __init__(self, switch: int) -> None:
        self.switch, self.tick = switch, 0

    def observe(self) -> np.ndarray:
        return np.array([float(self.tick >= self.switch)], np.float32)

    def act(self, action: np.ndarray) -> None:
        pass

    def advance(self, tick: int, action: np.ndarray | None) -> None:
        self.tick = tick + 1


def _reaction_ticks(max_in_flight: int, switch: int = 41) -> tuple[int, list[int]]:
    clock, robot = FakeClock(), StepRobot(switch)
    inference = SimulatedInference(lambda obs: np.full((50, 1), obs[0]), clock, lambda r: 0.1, workers=max_in_flight)
    cfg = AsyncEngineCfg(
        rate_hz=RATE, chunk_start="observation", request_margin=50, initial_latency_s=0.1, latency_warmup=0,
        max_in_flight=max_in_flight,
    )  # fmt: skip
    engine = AsyncChunkEngine(robot, inference, clock, cfg, tick_hook=robot.advance)
    stats = engine.run(80)
    assert stats.starved_ticks == 0 and stats.superseded == 0
    first = next(t for t, a in enumerate(engine.executed) if a is not None and a[0] == 1.0)
    return first - switch, stats.request_ticks


@pytest.mark.parametrize(("max_in_flight", "reaction", "spacing"), [(1, 9, 5), (2, 6, 3), (5, 5, 1)])
def test_overlapping_requests_react_sooner(max_in_flight, reaction, spacing):
    # 100 ms latency = 5 ticks. One request in flight: a new observation every 5 ticks, so a change at tick 41 waits
    # for the request of tick 45 and acts at 50. Staggered requests sample it every ceil(5 / n) ticks.
    got, requests = _reaction_ticks(max_in_flight)
    assert got == reaction
    assert set(np.diff(requests)) == {spacing}


def test_a_chunk_overtaken_by_a_newer_one_is_dropped():
    clock = FakeClock()
    latencies = {0: 0.3}  # the first request is slow; the second (tick 3) arrives first
    inference = SimulatedInference(ramp_policy, clock, lambda r: latencies.get(r.request_id, 0.05), workers=2)
    cfg = AsyncEngineCfg(
        rate_hz=RATE, initial_latency_s=0.1, latency_warmup=0, chunk_start="observation", max_in_flight=2
    )
    engine = AsyncChunkEngine(TrackingRobot(), inference, clock, cfg)
    stats = engine.run(40)
    assert stats.superseded == 1
    assert 0 not in engine.executed_chunks and engine.executed_chunks[6] == 1
    with pytest.raises(ValueError, match="max_in_flight"):
        AsyncChunkEngine(TrackingRobot(), inference, clock, AsyncEngineCfg(max_in_flight=0))


def test_threaded_inference_runs_requests_on_several_workers_at_once():
    import threading

    from rslkit.deploy.inference_worker import InferenceRequest

    barrier = threading.Barrier(2, timeout=5.0)  # breaks unless two calls run at the same time

    def policy(obs):
        barrier.wait()
        return ramp_policy(obs)

    inference = ThreadedInference(policy, MonotonicClock(), workers=2)
    try:
        for i in range(2):
            inference.submit(InferenceRequest(np.zeros(1, np.float32), i, i, i))
        assert inference.busy and inference.in_flight == 2
        with pytest.raises(RuntimeError, match="2 worker"):
            inference.submit(InferenceRequest(np.zeros(1, np.float32), 2, 2, 2))
        results, deadline = [], time.perf_counter() + 10
        while len(results) < 2 and time.perf_counter() < deadline:
            result = inference.poll()
            if result is None:
                time.sleep(0.001)
            else:
                results.append(result)
        assert sorted(r.request.request_id for r in results) == [0, 1]
        assert all(r.error is None for r in results) and not inference.busy
    finally:
        inference.close()
    with pytest.raises(ValueError, match="workers"):
        ThreadedInference(ramp_policy, MonotonicClock(), workers=0)
