"""Chunk inference off the control thread: a real worker thread, and a simulated one with scripted latency."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rslkit.deploy.clock import Clock, set_realtime_priority

ChunkFn = Callable[[Any], np.ndarray]
"""``obs -> chunk [H, A]`` (e.g. an :class:`~rslkit.deploy.onnx_policy.OnnxPolicy` called on one sample)."""


@dataclass
class InferenceRequest:
    """A chunk request made at tick ``tick``; ``start`` is the tick the chunk's first action belongs to."""

    obs: Any
    tick: int
    start: int
    request_id: int


@dataclass
class InferenceResult:
    """A finished request: ``chunk [H, A]``, timing on the engine's clock, or the error raised."""

    request: InferenceRequest
    chunk: np.ndarray | None
    submitted_at: float
    finished_at: float
    error: BaseException | None = None

    @property
    def latency_s(self) -> float:
        """Seconds from submission to completion."""
        return self.finished_at - self.submitted_at


class ThreadedInference:
    """Runs ``chunk_fn`` on ``workers`` daemon worker threads; up to ``workers`` requests in flight at a time.

    Args:
        chunk_fn: the policy; with ``workers > 1`` it is called from several threads at once, so it must be
            thread-safe (an ``OnnxPolicy``'s ``InferenceSession.run`` is) and release the GIL while it computes.
        clock: the engine's clock (timestamps).
        rt_priority: ``SCHED_FIFO`` priority of the worker thread (Linux; None: normal scheduling). Give it one
            below a real-time control thread's: the worker then runs whenever the control loop sleeps, ahead of
            other processes. At normal priority a loaded machine can deschedule the worker while it holds Python's
            GIL, and the control thread then waits for the GIL however high its own priority is.
        workers: worker threads (requests computed at once).

    Raises:
        PermissionError: when a worker may not use real-time scheduling.
        ValueError: for ``workers < 1``.
    """

    def __init__(self, chunk_fn: ChunkFn, clock: Clock, rt_priority: int | None = None, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}.")
        self.chunk_fn, self.clock = chunk_fn, clock
        self.rt_priority, self.workers = rt_priority, workers
        self._requests: queue.Queue[tuple[InferenceRequest, float] | None] = queue.Queue(maxsize=workers)
        self._results: queue.Queue[InferenceResult] = queue.Queue()
        self._in_flight = 0
        self._start_errors: list[BaseException] = []
        self.native_ids: list[int] = []
        """OS ids of the worker threads (set once they run)."""
        self._threads = []
        for i in range(workers):
            ready = threading.Event()
            thread = threading.Thread(target=self._loop, args=(ready,), name=f"rslkit-inference-{i}", daemon=True)
            thread.start()
            ready.wait(timeout=5.0)
            self._threads.append(thread)
        if self._start_errors:
            self.close()
            raise self._start_errors[0]

    @property
    def native_id(self) -> int | None:
        """OS id of the first worker thread (None until it runs)."""
        return self.native_ids[0] if self.native_ids else None

    @property
    def busy(self) -> bool:
        """Whether every worker has a request (submitted, result not yet polled)."""
        return self._in_flight >= self.workers

    @property
    def in_flight(self) -> int:
        """Requests submitted whose results have not been polled."""
        return self._in_flight

    def submit(self, request: InferenceRequest) -> None:
        """Start ``request``.

        Raises:
            RuntimeError: when every worker already has a request in flight.
        """
        if self.busy:
            raise RuntimeError(
                f"{self._in_flight} inference request(s) already in flight on {self.workers} worker(s); poll() a "
                "result first."
            )
        self._in_flight += 1
        self._requests.put((request, self.clock.now()))

    def poll(self) -> InferenceResult | None:
        """A finished result, if any, in order of completion (never blocks)."""
        try:
            result = self._results.get_nowait()
        except queue.Empty:
            return None
        self._in_flight -= 1
        return result

    def _loop(self, ready: threading.Event) -> None:
        self.native_ids.append(threading.get_native_id())
        try:
            if self.rt_priority is not None:
                set_realtime_priority(self.rt_priority)  # this thread only (Linux schedules threads)
        except BaseException as err:  # raised by __init__ on the caller's thread
            self._start_errors.append(err)
            return
        finally:
            ready.set()
        while True:
            item = self._requests.get()
            if item is None:
                return
            request, submitted = item
            try:
                chunk, error = np.asarray(self.chunk_fn(request.obs)), None
            except BaseException as err:  # reported to the control thread, which decides
                chunk, error = None, err
            self._results.put(InferenceResult(request, chunk, submitted, self.clock.now(), error))

    def close(self) -> None:
        """Stop the worker threads (each after its request in flight, if any)."""
        alive = [t for t in self._threads if t.is_alive()]
        for _ in alive:
            self._requests.put(None)
        for thread in alive:
            thread.join(timeout=5.0)


class SimulatedInference:
    """Computes the chunk at once and releases it when ``latency_fn(request)`` seconds have passed on the clock.

    Deterministic with a :class:`~rslkit.deploy.clock.FakeClock`: the tests and benchmarks script the latency.
    ``workers`` requests may be in flight at once; results come out in order of their ready times.
    """

    def __init__(
        self, chunk_fn: ChunkFn, clock: Clock, latency_fn: Callable[[InferenceRequest], float], workers: int = 1
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}.")
        self.chunk_fn, self.clock, self.latency_fn, self.workers = chunk_fn, clock, latency_fn, workers
        self._pending: list[InferenceResult] = []

    @property
    def busy(self) -> bool:
        """Whether every worker has a request in flight."""
        return len(self._pending) >= self.workers

    def submit(self, request: InferenceRequest) -> None:
        """Start ``request`` (its result is ready ``latency_fn(request)`` seconds from now)."""
        if self.busy:
            raise RuntimeError(
                f"{len(self._pending)} inference request(s) already in flight on {self.workers} worker(s); poll() a "
                "result first."
            )
        now = self.clock.now()
        ready = now + float(self.latency_fn(request))
        self._pending.append(InferenceResult(request, np.asarray(self.chunk_fn(request.obs)), now, ready))
        self._pending.sort(key=lambda r: r.finished_at)

    def poll(self) -> InferenceResult | None:
        """The earliest result whose time has come."""
        if not self._pending or self.clock.now() < self._pending[0].finished_at - 1e-9:
            return None
        return self._pending.pop(0)

    def close(self) -> None:
        """Nothing to stop."""
