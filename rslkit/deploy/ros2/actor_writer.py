"""The actor mode's writer thread: batches of transitions from the control loop into the spool, off its thread.

The control loop hands over rows and returns at once; a writer thread stacks them into a ``wire.TransitionBatch``
and appends it to the :class:`~rslkit.realworld.spool.Spool` (an encode and an fsync). When the disk stalls, rows
wait in memory up to ``max_buffered`` transitions; beyond that new batches are dropped, counted and logged, and the
control loop still never waits.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rslkit.realworld import wire
from rslkit.realworld.spool import Spool

log = logging.getLogger(__name__)
EPISODE_FILE = "actor_episodes.json"
"""Beside the spool's own files: the next episode number, so that (actor id, episode, step) keys never repeat
across restarts of the node."""
RETRY_S = 0.5


class Row(NamedTuple):
    """One transition: ``obs`` and ``next_obs`` ``[D]`` float32 of the policy's group, ``action [A]`` float32."""

    obs: np.ndarray
    action: np.ndarray
    reward: float
    done: bool
    truncated: bool
    next_obs: np.ndarray
    episode: int
    step: int
    policy_version: int
    intervention: bool


def stack(rows: list[Row], group: str) -> wire.TransitionBatch:
    """``rows`` as one batch of ``N = len(rows)`` transitions."""
    return wire.TransitionBatch(
        obs={group: np.stack([r.obs for r in rows]).astype(np.float32)},
        action=np.stack([r.action for r in rows]).astype(np.float32),
        reward=np.array([r.reward for r in rows], np.float32),
        done=np.array([r.done for r in rows], bool),
        truncated=np.array([r.truncated for r in rows], bool),
        next_obs={group: np.stack([r.next_obs for r in rows]).astype(np.float32)},
        episode=np.array([r.episode for r in rows], np.int64),
        step=np.array([r.step for r in rows], np.int64),
        policy_version=np.array([r.policy_version for r in rows], np.int64),
        intervention=np.array([r.intervention for r in rows], bool),
    )


class EpisodeCounter:
    """The next episode number of a spool directory, stored durably before any transition of an episode is spooled."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / EPISODE_FILE
        self.next_episode = 0
        if self.path.exists():
            try:
                value = json.loads(self.path.read_text())["next_episode"]
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{self.path} is damaged ({err}); remove it only with the spool directory.") from None
            if type(value) is not int or value < 0:
                raise ValueError(f"{self.path} holds next_episode {value!r}; remove it only with the spool directory.")
            self.next_episode = value

    def cover(self, episode: int) -> None:
        """Make sure a restart numbers its episodes after ``episode`` (write, fsync, rename, fsync the directory)."""
        if episode < self.next_episode:
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"next_episode": episode + 1}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.next_episode = episode + 1


class SpoolWriter:
    """Appends submitted rows to ``spool`` from its own thread.

    Args:
        spool: the actor's spool (thread-safe; the network client reads it meanwhile).
        group: the observation group of the rows.
        max_buffered: transitions waiting in memory at most.
        episodes: the spool directory's episode counter, advanced before an episode's first append.
    """

    def __init__(self, spool: Spool, group: str, max_buffered: int, episodes: EpisodeCounter) -> None:
        self.spool, self.group, self.max_buffered, self.episodes = spool, group, max_buffered, episodes
        self._queue: queue.SimpleQueue[list[Row] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.buffered = 0
        """Transitions submitted and not yet spooled."""
        self.spooled = 0
        self.dropped = 0
        """Transitions dropped because ``max_buffered`` were waiting (the disk was slower than the robot)."""
        self.refused = 0
        """Transitions the spool refused (a value the learner would refuse too, or the spool closed)."""
        self._thread = threading.Thread(target=self._run, name="rslkit-actor-spool", daemon=True)
        self._thread.start()

    def submit(self, rows: list[Row]) -> bool:
        """Queue ``rows`` for the spool without waiting; False (and counted as dropped) when the buffer is full."""
        with self._lock:
            if self.buffered + len(rows) > self.max_buffered:
                self.dropped += len(rows)
                dropped = self.dropped
            else:
                self.buffered += len(rows)
                dropped = 0
        if dropped:
            if dropped == len(rows) or dropped // 1000 != (dropped - len(rows)) // 1000:
                log.warning("actor: %d transitions dropped so far: %d wait for a slow disk", dropped, self.buffered)
            return False
        self._queue.put(rows)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Spool what is queued (for ``timeout_s`` at most), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._stop.set()
        self._thread.join(1.0)
        if self.buffered:
            log.warning("actor: %d transitions were not spooled before shutdown", self.buffered)

    def _run(self) -> None:
        while (rows := self._queue.get()) is not None:
            self._append(rows)
            with self._lock:
                self.buffered -= len(rows)

    def _append(self, rows: list[Row]) -> None:
        batch = stack(rows, self.group)
        while not self._stop.is_set():
            try:
                self.episodes.cover(max(r.episode for r in rows))
                self.spool.append(batch)
                self.spooled += len(rows)
                return
            except ValueError as err:  # WireError: a value the learner would refuse too; or the spool was closed
                self.refused += len(rows)
                log.error("actor: %d transitions refused by the spool: %s", len(rows), err)
                return
            except OSError as err:  # disk full or failing: keep the batch and retry
                log.error("actor: spooling %d transitions failed (%s); retrying in %.1f s", len(rows), err, RETRY_S)
                self._stop.wait(RETRY_S)
