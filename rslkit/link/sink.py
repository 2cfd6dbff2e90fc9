"""The learner's handler of ``transitions`` messages: stream checks, the sink that stores them, per-actor watermarks
that drop resends, the acknowledgement; and an in-memory sink for tests and examples.

The actor resends everything the learner has not acknowledged, so the learner sees some transitions twice (a
message acknowledged only in part, an ack lost when the connection broke). A transition is stored at most once by
its key: a row is dropped when its seq is at or below the actor's watermark (everything up to it is stored), or when
its (actor, episode, step) key is already stored under another seq (an actor whose spool was lost and that resends
from a copy, or replays rows under new seqs). The watermark is also the acknowledgement: the highest seq up to which
all of that actor's transitions are stored, so a sink must return it only once the rows are as safe as it promises
(in its replay buffer, or on disk for a learner that restores from checkpoints).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from rslkit.link.server import Refused, Stream
from rslkit.link.transitions import TransitionBatch, Transitions, TransitionSchema, select

log = logging.getLogger(__name__)


class TransitionSink(Protocol):
    """Stores the transitions of one validated message; returns the highest seq up to which all of the actor's
    transitions are stored (-1: none yet). The server calls it from one thread at a time. Raise ValueError to refuse
    the message (the actor's stream then ends with FAILED_PRECONDITION and that text)."""

    def __call__(self, actor_id: str, message: Transitions) -> int: ...


class Watermarks:
    """Per actor, the highest seq up to which every transition is stored, and per episode the highest step stored;
    says which rows of a message are new.

    The handler passes a sink only messages of consecutive seqs that increase along a stream, so with this helper a
    sink stores each transition once however often it is resent. Not thread-safe (the server serializes sink calls).

    Args:
        state: :meth:`snapshot` output restored from a checkpoint (or an older checkpoint's ``{actor_id: seq}``).
    """

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        state = dict(state or {})
        if "seq" in state and isinstance(state["seq"], Mapping):
            self._acked: dict[str, int] = {a: int(s) for a, s in state["seq"].items()}
            steps = state.get("steps") or {}
            self._steps = {a: {int(e): int(s) for e, s in ep.items()} for a, ep in steps.items()}
        else:  # a checkpoint of an rslkit that deduplicated by seq only
            self._acked, self._steps = {a: int(s) for a, s in state.items()}, {}

    def get(self, actor_id: str) -> int:
        """The actor's watermark (-1 for an actor never heard of)."""
        return self._acked.get(actor_id, -1)

    def snapshot(self) -> dict[str, Any]:
        """Every actor's watermark and highest step per episode, to checkpoint beside the stored transitions."""
        return {"seq": dict(self._acked), "steps": {a: dict(ep) for a, ep in self._steps.items()}}

    def new_rows(self, actor_id: str, seq: np.ndarray, episode: np.ndarray, step: np.ndarray) -> np.ndarray:
        """``[N]`` bool, the rows of a message (seqs ``seq: [N]`` consecutive, keys ``(episode, step)``) not stored.

        An actor this learner has never heard of may start anywhere (its spool already dropped what an earlier
        learner acknowledged). For a known actor a message that starts beyond watermark + 1 is a gap: ValueError.
        """
        first = int(seq[0])
        if actor_id not in self._acked:
            if first > 0:
                log.warning(
                    "actor %s starts at seq %d: seqs before it were acknowledged by an earlier learner", actor_id, first
                )
            new = np.ones(len(seq), bool)
        else:
            acked = self._acked[actor_id]
            if first > acked + 1:
                raise ValueError(
                    f"actor {actor_id!r} sent seq {first}.., but this learner holds its transitions up to seq {acked}: "
                    f"seqs {acked + 1}..{first - 1} are missing. The learner acknowledged them before it stored them "
                    "durably (its checkpoint is older than its acks): restore a checkpoint that matches its acks."
                )
            new = seq > acked
        stored = self._steps.get(actor_id, {})
        if stored:
            highest = np.array([stored.get(int(e), -1) for e in episode], np.int64)
            new &= np.asarray(step) > highest
        return new

    def advance(self, actor_id: str, last_seq: int, episode: np.ndarray, step: np.ndarray) -> int:
        """Record that every seq up to ``last_seq`` of the actor is stored, and the keys ``(episode, step)`` of the
        rows stored; returns the new watermark."""
        self._acked[actor_id] = max(self._acked.get(actor_id, -1), int(last_seq))
        stored = self._steps.setdefault(actor_id, {})
        for e, s in zip(episode.tolist(), step.tolist()):
            stored[e] = max(stored.get(e, -1), s)
        return self._acked[actor_id]


class MemorySink:
    """A sink that keeps every new transition in memory (a stand-in for the replay buffer of the learner).

    Attributes:
        received: ``[(actor_id, seq: [n], batch)]`` in arrival order, each transition once.
        duplicates: resent transitions dropped.
    """

    def __init__(self) -> None:
        self.watermarks = Watermarks()
        self.received: list[tuple[str, np.ndarray, TransitionBatch]] = []
        self.duplicates = 0
        self._lock = threading.Lock()

    def __call__(self, actor_id: str, message: Transitions) -> int:
        """Keep the rows of ``message`` that are new; returns the actor's watermark."""
        with self._lock:
            b = message.batch
            rows = self.watermarks.new_rows(actor_id, message.seq, b.episode, b.step)
            self.duplicates += int((~rows).sum())
            if rows.any():
                self.received.append((actor_id, message.seq[rows], select(b, rows)))
            return self.watermarks.advance(actor_id, int(message.seq[-1]), b.episode[rows], b.step[rows])

    def count(self, actor_id: str | None = None) -> int:
        """Transitions stored (of one actor, or of all)."""
        with self._lock:
            return sum(len(s) for a, s, _ in self.received if actor_id in (None, a))

    def seqs(self, actor_id: str) -> list[int]:
        """The stored seqs of one actor, in arrival order."""
        with self._lock:
            return [int(x) for a, s, _ in self.received if a == actor_id for x in s]


class TransitionsHandler:
    """The server's handler of ``transitions``: checks each message against its stream (consecutive seqs that
    increase along the stream), hands it to ``sink`` (one call at a time) and acknowledges the watermark it returns.

    Args:
        schema: the transitions' schema; messages of another are refused.
        sink: stores them (:class:`TransitionSink`).
    """

    kinds: tuple[str, ...] = ("transitions",)

    def __init__(self, schema: TransitionSchema, sink: TransitionSink) -> None:
        self.schema, self.sink = schema, sink
        self._lock = threading.Lock()

    def handle(self, stream: Stream, message: Transitions) -> None:
        """Store ``message`` and acknowledge it; :class:`~rslkit.link.server.Refused` for a message out of order."""
        first, last = int(message.seq[0]), int(message.seq[-1])
        if last - first != len(message.seq) - 1:
            raise Refused(f"seqs {first}..{last} of {len(message.seq)} transitions are not consecutive.")
        if first <= stream.last_seq:
            raise Refused(f"seqs {first}..{last} do not follow seq {stream.last_seq}, sent before (non-monotonic).")
        stream.last_seq = last
        with self._lock:
            acked = self.sink(stream.actor_id, message)  # a ValueError refuses it (FAILED_PRECONDITION)
        if type(acked) is not int or acked < -1:
            raise TypeError(f"the sink returned {acked!r}; it must return the actor's watermark, an int >= -1.")
        stream.acknowledge(acked, len(message.seq))

    def stream_ended(self, stream: Stream) -> None:
        """Nothing to clean up: the watermarks outlive streams."""
