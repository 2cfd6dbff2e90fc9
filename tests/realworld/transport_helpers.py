"""Test helpers of the transport: the network-namespace gate, a file-backed learner sink, fast client settings, a
learner that can be restarted on its port, and bounded waiting."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rslkit.link.client import Backoff, ClientConfig
from rslkit.link.server import LearnerServer
from rslkit.link.sink import TransitionsHandler, Watermarks
from rslkit.link.spool import Spool
from rslkit.link.transitions import Transitions
from tests.link.wire_samples import SCHEMA, make_batch

needs_netns = pytest.mark.skipif(
    os.environ.get("RSLKIT_NETNS_TESTS") != "1",
    reason="opens sockets: runs only inside a private network namespace, with `make test-realworld` "
    "(which sets RSLKIT_NETNS_TESTS=1)",
)
FAST = ClientConfig(
    heartbeat_s=0.1, dead_after_s=1.0, poll_s=0.01, close_s=2.0, window_bytes=32 << 10, backoff=Backoff(0.05, 0.3)
)
"""Quick heartbeats, deadlines and reconnects, and a small window (32 KiB in flight) so that windowing is exercised."""


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 10 ms until it is true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


def serve(sink: Any, port: int = 0, retry_s: float = 5.0, **kwargs: Any) -> LearnerServer:
    """A learner on 127.0.0.1:``port``; binding is retried for ``retry_s`` (a port just freed may still be held)."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return LearnerServer([TransitionsHandler(SCHEMA, sink)], f"127.0.0.1:{port}", **kwargs)
        except ValueError:
            if port == 0 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def fill(
    spool: Spool, episodes: int, rng: np.random.Generator, start_episode: int = 0, took: list[float] | None = None
) -> Counter[tuple[str, int, int]]:
    """Append ``episodes`` batches of 1-4 transitions; returns their keys (actor, episode, step), each once.

    ``took`` collects how long each append took (s).
    """
    keys: Counter[tuple[str, int, int]] = Counter()
    for episode in range(start_episode, start_episode + episodes):
        batch = make_batch(int(rng.integers(1, 5)), rng, episode=episode)
        start = time.perf_counter()
        spool.append(batch)
        if took is not None:
            took.append(time.perf_counter() - start)
        keys.update((spool.actor_id, episode, int(s)) for s in batch.step)
    return keys


class FileSink:
    """A learner sink that survives its process: every new transition's key goes to a JSON-lines file, fsync'ed
    before the watermark is returned (so everything acknowledged is on disk); a reopen restores the watermarks.

    A torn last line (the process killed while writing it, before its ack) is cut off on open.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.watermarks = Watermarks()
        self.keys: Counter[tuple[str, int, int]] = Counter()  # (actor, episode, step) -> times stored
        self.duplicates = 0
        self._restore()
        self._file = open(self.path, "ab")

    def _restore(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(keep)
        for line in data[:keep].splitlines():
            row = json.loads(line)
            episode, step = np.asarray(row["episode"]), np.asarray(row["step"])
            self.watermarks.new_rows(row["actor"], np.asarray(row["seq"]), episode, step)
            self.watermarks.advance(row["actor"], row["seq"][-1], episode, step)
            self.keys.update((row["actor"], e, s) for e, s in zip(row["episode"], row["step"]))

    def __call__(self, actor_id: str, message: Transitions) -> int:
        b = message.batch
        rows = self.watermarks.new_rows(actor_id, message.seq, b.episode, b.step)
        self.duplicates += int((~rows).sum())
        if rows.any():
            row = {"actor": actor_id, "seq": message.seq[rows].tolist()}
            row |= {"episode": b.episode[rows].tolist(), "step": b.step[rows].tolist()}
            self._file.write(json.dumps(row).encode() + b"\n")
            self._file.flush()
            os.fsync(self._file.fileno())
            self.keys.update((actor_id, e, s) for e, s in zip(row["episode"], row["step"]))
        return self.watermarks.advance(actor_id, int(message.seq[-1]), b.episode[rows], b.step[rows])

    def close(self) -> None:
        self._file.close()
