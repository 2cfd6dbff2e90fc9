"""Clocks for the control loop: the real monotonic clock and a fake one for deterministic tests."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic time line."""

    def now(self) -> float:
        """Current time in seconds."""
        ...

    def sleep_until(self, deadline: float) -> None:
        """Return at ``deadline`` (immediately when it has passed)."""
        ...


class MonotonicClock:
    """``time.perf_counter`` with a sleep that overshoots by the OS timer slack only (coarse sleep, then spin)."""

    def __init__(self, spin_s: float = 0.0005) -> None:
        self.spin_s = spin_s

    def now(self) -> float:
        """Current time in seconds."""
        return time.perf_counter()

    def sleep_until(self, deadline: float) -> None:
        """Sleep to ``deadline - spin_s`` and spin the rest."""
        remaining = deadline - time.perf_counter()
        if remaining > self.spin_s:
            time.sleep(remaining - self.spin_s)
        while time.perf_counter() < deadline:
            pass


class FakeClock:
    """Manual time: :meth:`sleep_until` jumps forward, :meth:`advance` adds work time (thread-safe).

    Args:
        start: initial time in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        """Current fake time."""
        with self._lock:
            return self._t

    def sleep_until(self, deadline: float) -> None:
        """Jump to ``deadline`` if it is in the future."""
        with self._lock:
            self._t = max(self._t, deadline)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (e.g. the duration of simulated work in a tick)."""
        if seconds < 0:
            raise ValueError(f"Time only moves forward; got advance({seconds}).")
        with self._lock:
            self._t += seconds


def set_realtime_priority(priority: int | None) -> int | None:
    """Run the calling thread under ``SCHED_FIFO`` at ``priority`` (1-99), as real-time control loops do (e.g.
    ros2_control), so that other processes on a busy CPU cannot delay its ticks; threads it starts afterwards
    inherit the policy (start inference workers first to keep them at normal priority).

    Args:
        priority: the ``SCHED_FIFO`` priority; None restores the normal ``SCHED_OTHER`` policy.

    Returns:
        The previous policy (``os.SCHED_*``), to restore it later; None when nothing changed (not Linux).

    Raises:
        PermissionError: when the process may not use real-time scheduling (needs root or ``CAP_SYS_NICE``, e.g.
            ``ulimit -r 99`` for the user).
    """
    import os

    if not hasattr(os, "sched_setscheduler"):
        return None
    previous = os.sched_getscheduler(0)
    if priority is None:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return previous
    if not 1 <= priority <= 99:
        raise ValueError(f"SCHED_FIFO priorities are 1-99, got {priority}.")
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError as err:
        raise PermissionError(
            f"Real-time scheduling was refused ({err}); run as root, grant CAP_SYS_NICE, or raise `ulimit -r`."
        ) from None
    return previous
