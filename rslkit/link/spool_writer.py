"""Spool appends off the control loop: the loop hands over finished rows, a thread stacks them, computes rewards,
numbers episodes durably and appends (an encode and an fsync).

An append costs an fsync (0.5-2 ms here, far more on a slow SD card); a control loop at 50-100 Hz must not wait for
it. :class:`SpoolWriter` takes rows into a queue and appends them from its own thread, after an optional reward
function (a success classifier, a learned reward model) has replaced their rewards. When the disk falls behind and
``max_buffered`` rows wait, the policy decides: ``wait`` makes :meth:`SpoolWriter.submit` wait (nothing is lost;
a simulated robot), ``drop`` drops and counts the new rows (the control loop never waits; a real robot). A disk
error is retried; a batch the spool refuses (a value the learner would refuse too) or a failing reward function is
counted and kept in :attr:`SpoolWriter.error`. Torch-free.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from rslkit.link.episodes import EpisodeNumbers
from rslkit.link.spool import Spool
from rslkit.link.transitions import Row, TransitionBatch, stack, with_rewards

log = logging.getLogger(__name__)
RewardFn = Callable[[TransitionBatch], np.ndarray]
"""Rewards ``[N]`` for a batch of transitions (replacing the env's): the actor's reward plug-in."""
RETRY_S = 0.5
"""Wait between attempts to append after a disk error."""


class SpoolWriter:
    """Appends submitted rows to ``spool`` from its own thread.

    Args:
        spool: the actor's spool (thread-safe; the network client reads it meanwhile).
        when_full: with ``max_buffered`` rows waiting, ``wait`` (submit blocks) or ``drop`` (new rows are dropped).
        max_buffered: rows waiting in memory at most.
        reward_fn: replaces each batch's rewards before it is spooled (None: keep the recorded ones).
        episodes: the actor's episode numbers, advanced past a batch's episodes before it is appended.
    """

    def __init__(
        self,
        spool: Spool,
        *,
        when_full: Literal["wait", "drop"] = "wait",
        max_buffered: int = 100_000,
        reward_fn: RewardFn | None = None,
        episodes: EpisodeNumbers | None = None,
    ) -> None:
        if when_full not in ("wait", "drop") or max_buffered < 1:
            raise ValueError(f"when_full must be wait or drop and max_buffered >= 1, got {when_full}, {max_buffered}.")
        self.spool, self.when_full, self.max_buffered = spool, when_full, max_buffered
        self.reward_fn, self.episodes = reward_fn, episodes
        self._queue: queue.SimpleQueue[list[Row] | None] = queue.SimpleQueue()
        self._room = threading.Condition()
        self._stop = threading.Event()
        self.buffered = 0
        """Rows submitted and not yet spooled (or refused)."""
        self.spooled = 0
        self.dropped = 0
        """Rows dropped because ``max_buffered`` were waiting (``drop``: the disk was slower than the robot)."""
        self.refused = 0
        """Rows the spool refused (a value the learner would refuse too, the spool closed) or the reward failed on."""
        self.error: Exception | None = None
        """The last refusal, or None."""
        self.append_s: list[float] = []
        """Seconds of each append (reward function included)."""
        self.put_wait_s = 0.0
        """Seconds :meth:`submit` waited for room (``wait``; 0 while the disk keeps up)."""
        self._thread = threading.Thread(target=self._run, name="rslkit-spool-writer", daemon=True)
        self._thread.start()

    def submit(self, rows: Sequence[Row]) -> bool:
        """Queue ``rows`` for the spool; False (and counted as dropped) when ``drop`` finds the buffer full."""
        rows = list(rows)
        with self._room:
            if self.buffered + len(rows) > self.max_buffered and self.buffered:
                if self.when_full == "drop":
                    self.dropped += len(rows)
                    if self.dropped == len(rows) or self.dropped // 1000 != (self.dropped - len(rows)) // 1000:
                        log.warning(
                            "actor: %d rows dropped so far: %d wait for a slow disk", self.dropped, self.buffered
                        )
                    return False
                start = time.perf_counter()
                while self.buffered + len(rows) > self.max_buffered and self.buffered:
                    self._room.wait(0.1)
                self.put_wait_s += time.perf_counter() - start
            self.buffered += len(rows)
        self._queue.put(rows)
        return True

    def idle(self) -> bool:
        """Whether every row submitted so far is spooled (or refused)."""
        return self.buffered == 0

    def close(self, timeout_s: float | None = None) -> None:
        """Spool what is queued (for ``timeout_s`` at most; None: all of it), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._stop.set()
        self._thread.join(1.0)
        if self.buffered:
            log.warning("actor: %d rows were not spooled before shutdown", self.buffered)

    def _run(self) -> None:
        while (rows := self._queue.get()) is not None:
            self._append(rows)
            with self._room:
                self.buffered -= len(rows)
                self._room.notify_all()

    def _append(self, rows: list[Row]) -> None:
        start = time.perf_counter()
        try:
            batch = stack(rows, self.spool.schema)
            if self.reward_fn is not None:
                batch = with_rewards(batch, self.reward_fn(batch))
        except Exception as err:  # a reward plug-in's bug: these rows are refused, the writer goes on
            self._refuse(rows, err)
            return
        while not self._stop.is_set():
            try:
                if self.episodes is not None:
                    self.episodes.cover(max(r.episode for r in rows))
                self.spool.append(batch)
                self.spooled += len(rows)
                self.append_s.append(time.perf_counter() - start)
                return
            except ValueError as err:  # WireError: a value the learner would refuse too; or the spool was closed
                self._refuse(rows, err)
                return
            except OSError as err:  # disk full or failing: keep the batch and retry
                log.error("actor: spooling %d rows failed (%s); retrying in %.1f s", len(rows), err, RETRY_S)
                self._stop.wait(RETRY_S)

    def _refuse(self, rows: list[Row], err: Exception) -> None:
        self.refused += len(rows)
        self.error = err
        log.error("actor: %d rows refused: %s", len(rows), err)
