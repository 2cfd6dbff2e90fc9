"""Where the learner server puts received transitions: the sink contract, per-actor watermarks that drop resends,
and an in-memory sink for tests and examples.

The actor resends everything the learner has not acknowledged, so the learner sees some transitions twice (a
message acknowledged only in part, an ack lost when the connection broke). Within one actor a sequence number
names exactly one (episode, step), so a sink drops a resend by its seq: everything at or below the actor's
watermark is already stored. The watermark is also the acknowledgement: the highest seq up to which all of that
actor's transitions are stored, so a sink must return it only once the rows are as safe as it promises (in its
replay buffer, or on disk for a learner that restores from checkpoints).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from rslkit.realworld import wire

log = logging.getLogger(__name__)


class TransitionSink(Protocol):
    """Stores the transitions of one validated message; returns the highest seq up to which all of the actor's
    transitions are stored (-1: none yet). The server calls it from one thread at a time. Raise ValueError to refuse
    the message (the actor's stream then ends with FAILED_PRECONDITION and that text)."""

    def __call__(self, actor_id: str, message: wire.Transitions) -> int: ...


class SeqWatermarks:
    """Per actor, the highest seq up to which every transition is stored; says which rows of a message are new.

    The server hands a sink only messages of consecutive seqs that increase along a stream, so with this helper a
    sink stores each transition once however often it is resent. Not thread-safe (the server serializes sink calls).

    Args:
        acked: watermarks restored from a checkpoint, ``{actor_id: seq}``.
    """

    def __init__(self, acked: Mapping[str, int] | None = None) -> None:
        self._acked: dict[str, int] = dict(acked or {})

    def get(self, actor_id: str) -> int:
        """The actor's watermark (-1 for an actor never heard of)."""
        return self._acked.get(actor_id, -1)

    def snapshot(self) -> dict[str, int]:
        """Every actor's watermark, to checkpoint beside the stored transitions."""
        return dict(self._acked)

    def new_rows(self, actor_id: str, seq: np.ndarray) -> np.ndarray:
        """``[N]`` bool, the rows of a message with seqs ``seq: [N]`` (consecutive) that are not stored yet.

        An actor this learner has never heard of may start anywhere (its spool already dropped what an earlier
        learner acknowledged). For a known actor a message that starts beyond watermark + 1 is a gap: ValueError.
        """
        first = int(seq[0])
        if actor_id not in self._acked:
            if first > 0:
                log.warning(
                    "actor %s starts at seq %d: seqs before it were acknowledged by an earlier learner", actor_id, first
                )
            return np.ones(len(seq), bool)
        acked = self._acked[actor_id]
        if first > acked + 1:
            raise ValueError(
                f"actor {actor_id!r} sent seq {first}.., but this learner holds its transitions up to seq {acked}: "
                f"seqs {acked + 1}..{first - 1} are missing. The learner acknowledged them before it stored them "
                "durably (its checkpoint is older than its acks): restore a checkpoint that matches its acks."
            )
        return seq > acked

    def advance(self, actor_id: str, last_seq: int) -> int:
        """Record that every seq up to ``last_seq`` of the actor is stored; returns the new watermark."""
        self._acked[actor_id] = max(self._acked.get(actor_id, -1), int(last_seq))
        return self._acked[actor_id]


def select(batch: wire.TransitionBatch, rows: np.ndarray) -> wire.TransitionBatch:
    """The transitions ``rows`` (a bool mask or indices) of ``batch``."""
    fields = ("action", "reward", "done", "truncated", "episode", "step", "policy_version", "intervention")
    return wire.TransitionBatch(
        obs={g: a[rows] for g, a in batch.obs.items()},
        next_obs={g: a[rows] for g, a in batch.next_obs.items()},
        **{f: getattr(batch, f)[rows] for f in fields},
    )


class MemorySink:
    """A sink that keeps every new transition in memory (a stand-in for the replay buffer of the learner).

    Attributes:
        received: ``[(actor_id, seq: [n], batch)]`` in arrival order, each transition once.
        duplicates: resent transitions dropped.
    """

    def __init__(self) -> None:
        self.watermarks = SeqWatermarks()
        self.received: list[tuple[str, np.ndarray, wire.TransitionBatch]] = []
        self.duplicates = 0
        self._lock = threading.Lock()

    def __call__(self, actor_id: str, message: wire.Transitions) -> int:
        """Keep the rows of ``message`` that are new; returns the actor's watermark."""
        with self._lock:
            rows = self.watermarks.new_rows(actor_id, message.seq)
            self.duplicates += int((~rows).sum())
            if rows.any():
                self.received.append((actor_id, message.seq[rows], select(message.batch, rows)))
            return self.watermarks.advance(actor_id, int(message.seq[-1]))

    def count(self, actor_id: str | None = None) -> int:
        """Transitions stored (of one actor, or of all)."""
        with self._lock:
            return sum(len(s) for a, s, _ in self.received if actor_id in (None, a))

    def seqs(self, actor_id: str) -> list[int]:
        """The stored seqs of one actor, in arrival order."""
        with self._lock:
            return [int(x) for a, s, _ in self.received if a == actor_id for x in s]
