"""Decides which joint-state arrivals start a control tick, phase-locked to the control rate."""

from __future__ import annotations


class TickGate:
    """Lets through one state per control period, tolerant to jitter.

    Times are the states' sample times (the ``JointState`` header stamp, or the arrival time when the publisher
    leaves it zero), so states that arrive bunched after a transport or scheduling delay still tick one by one.
    Ticks are scheduled at ``t0 + k / rate_hz`` (``t0``: the first state). A state ticks when it is no more than
    half a period before the next scheduled time: a stream at the control rate ticks on every message (when its
    stamps jitter by less than a quarter period around their schedule), a faster
    stream is decimated to the control rate, a repeated stamp never ticks twice. After a gap longer than a period
    the schedule restarts at that state.

    Args:
        rate_hz: control rate.
    """

    def __init__(self, rate_hz: float) -> None:
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}.")
        self.period = 1.0 / rate_hz
        self.next_time: float | None = None

    def ready(self, now: float) -> bool:
        """Whether a state sampled at ``now`` (seconds) starts a tick (and if so, advance the schedule)."""
        if self.next_time is None or now > self.next_time + self.period:
            self.next_time = now + self.period
            return True
        if now >= self.next_time - 0.5 * self.period:
            self.next_time += self.period
            return True
        return False
