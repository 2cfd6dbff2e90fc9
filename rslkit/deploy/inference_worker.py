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
    """Runs ``chunk_fn`` on one daemon worker thread; one request in flight at a time.

    Args:
        chunk_fn: the policy.
        clock: the engine's clock (timestamps).
        rt_priority: ``SCHED_FIFO`` priority of the worker thread (Linux; None: normal scheduling). Give it one
            below a real-time control thread's: the worker then runs whenever the control loop sleeps, ahead of
            other processes. At normal priority a loaded machine can deschedule the worker while it holds Python's
            GIL, and the control thread then waits for the GIL however high its own priority is.

    Raises:
        PermissionError: when the worker may not use real-time scheduling.
    """

    def __init__(self, chunk_fn: ChunkFn, clock: Clock, rt_priority: int | None = None) -> None:
        self.chunk_fn, self.clock = chunk_fn, clock
        self.rt_priority = rt_priority
        self._requests: queue.Queue[tuple[InferenceRequest, float] | None] = queue.Queue(maxsize=1)
        self._results: queue.Queue[InferenceResult] = queue.Queue()
        self._busy = False
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self.native_id: int | None = None
        """OS id of the worker thread (set once it runs)."""
        self._thread = threading.Thread(target=self._loop, name="rslkit-inference", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=5.0)
        if self._start_error is not None:
            self._thread.join(timeout=5.0)
            raise self._start_error

    @property
    def busy(self) -> bool:
        """Whether a request is in flight (submitted, result not yet polled)."""
        return self._busy

    def submit(self, request: InferenceRequest) -> None:
        """Start ``request``.

        Raises:
            RuntimeError: when a request is already in flight.
        """
        if self._busy:
            raise RuntimeError("An inference request is already in flight; poll() its result first.")
        self._busy = True
        self._requests.put((request, self.clock.now()))

    def poll(self) -> InferenceResult | None:
        """The finished result, if any (never blocks)."""
        try:
            result = self._results.get_nowait()
        except queue.Empty:
            return None
        self._busy = False
        return result

    def _loop(self) -> None:
        self.native_id = threading.get_native_id()
        try:
            if self.rt_priority is not None:
                set_realtime_priority(self.rt_priority)  # this thread only (Linux schedules threads)
        except BaseException as err:  # raised by __init__ on the caller's thread
            self._start_error = err
            return
        finally:
            self._ready.set()
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
        """Stop the worker thread (after the request in flight, if any)."""
        self._requests.put(None)
        self._thread.join(timeout=5.0)


class SimulatedInference:
    """Computes the chunk at once and releases it when ``latency_fn(request)`` seconds have passed on the clock.

    Deterministic with a :class:`~rslkit.deploy.clock.FakeClock`: the tests and benchmarks script the latency.
    """

    def __init__(self, chunk_fn: ChunkFn, clock: Clock, latency_fn: Callable[[InferenceRequest], float]) -> None:
        self.chunk_fn, self.clock, self.latency_fn = chunk_fn, clock, latency_fn
        self._pending: tuple[InferenceResult, float] | None = None

    @property
    def busy(self) -> bool:
        """Whether a request is in flight."""
        return self._pending is not None

    def submit(self, request: InferenceRequest) -> None:
        """Start ``request`` (its result is ready ``latency_fn(request)`` seconds from now)."""
        if self._pending is not None:
            raise RuntimeError("An inference request is already in flight; poll() its result first.")
        now = self.clock.now()
        ready = now + float(self.latency_fn(request))
        self._pending = (InferenceResult(request, np.asarray(self.chunk_fn(request.obs)), now, ready), ready)

    def poll(self) -> InferenceResult | None:
        """The result once its time has come."""
        if self._pending is None or self.clock.now() < self._pending[1] - 1e-9:
            return None
        result, self._pending = self._pending[0], None
        return result

    def close(self) -> None:
        """Nothing to stop."""
