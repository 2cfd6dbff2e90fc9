"""Spool appends off the control loop: the loop hands over finished batches, a thread computes rewards and fsyncs.

An append costs an fsync (0.5-2 ms here, far more on a slow SD card); a control loop at 50-100 Hz must not wait for
it. :class:`SpoolWriter` takes batches into a queue and appends them from its own thread, after an optional reward
function (a success classifier, a learned reward model) has replaced their rewards. Nothing is dropped: a full
queue makes :meth:`put` wait, which the caller counts. Torch-free.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from rslkit.realworld import wire
from rslkit.realworld.spool import Spool

log = logging.getLogger(__name__)
RewardFn = Callable[[wire.TransitionBatch], np.ndarray]
"""Rewards ``[N]`` for a batch of transitions (replacing the env's)."""


class SpoolWriter:
    """Appends batches to ``spool`` from a background thread.

    Args:
        spool: the actor's spool.
        reward_fn: replaces each batch's rewards before it is spooled (None: keep the env's).
        max_queue: batches waiting at most; a :meth:`put` beyond it waits.
    """

    def __init__(self, spool: Spool, reward_fn: RewardFn | None = None, max_queue: int = 256) -> None:
        self.spool, self.reward_fn = spool, reward_fn
        self._queue: queue.Queue[wire.TransitionBatch | None] = queue.Queue(maxsize=max_queue)
        self.error: BaseException | None = None
        self.appended = 0
        self.append_s: list[float] = []
        """Seconds of each append (reward function included)."""
        self._busy = 0
        """Batches put and not yet appended."""
        self._busy_lock = threading.Lock()
        self.put_wait_s = 0.0
        """Seconds :meth:`put` waited for a full queue (0 while the disk keeps up)."""
        self._thread = threading.Thread(target=self._run, name="rslkit-spool-writer", daemon=True)
        self._thread.start()

    def put(self, batch: wire.TransitionBatch) -> None:
        """Queue ``batch`` for the spool.

        Raises:
            RuntimeError: the writer failed earlier (a full disk, a bad reward): stop the robot, the data is unsafe.
        """
        if self.error is not None:
            raise RuntimeError(f"the spool writer failed: {self.error}") from self.error
        with self._busy_lock:
            self._busy += 1
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            t0 = time.perf_counter()
            self._queue.put(batch)
            self.put_wait_s += time.perf_counter() - t0

    def idle(self) -> bool:
        """Whether every batch put so far is in the spool."""
        return self._busy == 0

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                t0 = time.perf_counter()
                if self.reward_fn is not None:
                    batch = _with_rewards(batch, self.reward_fn(batch))
                self.spool.append(batch)
                self.append_s.append(time.perf_counter() - t0)
                self.appended += len(batch)
                with self._busy_lock:
                    self._busy -= 1
            except BaseException as err:  # surfaced to the control loop by put() and close()
                log.error("spool writer: %s", err)
                self.error = err
                return

    def close(self) -> None:
        """Append everything queued, then stop the thread.

        Raises:
            RuntimeError: when an append failed.
        """
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the spool writer failed: {self.error}") from self.error


def _with_rewards(batch: wire.TransitionBatch, reward: np.ndarray) -> wire.TransitionBatch:
    reward = np.asarray(reward, np.float32)
    if reward.shape != batch.reward.shape or not np.isfinite(reward).all():
        raise ValueError(
            f"the reward function returned shape {reward.shape} (or non-finite values) for {len(batch)} transitions; "
            "it must return finite rewards [N]."
        )
    fields = {f: getattr(batch, f) for f in ("obs", "action", "done", "truncated", "next_obs", "episode", "step")}
    return wire.TransitionBatch(
        **fields, reward=reward, policy_version=batch.policy_version, intervention=batch.intervention
    )
