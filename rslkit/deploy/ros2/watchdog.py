"""Staleness of the newest joint state, on the controller's monotonic clock."""

from __future__ import annotations


class Watchdog:
    """Reports a fault when no valid joint state was received for more than ``timeout_s``.

    Args:
        timeout_s: largest accepted age of the newest state, in seconds.
    """

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}.")
        self.timeout_s = timeout_s
        self.last_feed: float | None = None

    def feed(self, now: float) -> None:
        """A valid state arrived at ``now``."""
        self.last_feed = now

    def fault(self, now: float) -> str | None:
        """Why the state is not usable at ``now`` (None: it is fresh)."""
        if self.last_feed is None:
            return "no joint state received yet"
        age = now - self.last_feed
        if age > self.timeout_s:
            return f"joint state is stale ({age * 1e3:.1f} ms old, timeout {self.timeout_s * 1e3:.1f} ms)"
        return None
