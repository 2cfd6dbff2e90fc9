"""The actor's on-disk spool: each transition is on disk before it is sent, and deleted only once acknowledged.

A spool directory holds::

    spool.json                  {"format": 1, "actor_id": ..., "schema": {...}, "acked": seq} (replaced atomically)
    lock                        flock'ed while a Spool has the directory open
    00000000000000000000.seg    a :class:`~rslkit.link.segment_log.SegmentLog` whose segments are named by the
    00000000000000000512.seg    first seq they hold: messages of kind "transitions", as ``wire.encode`` made them

:meth:`Spool.append` writes one message and fsyncs it before it returns, so a crash (kill -9, power loss) can only
tear the message being written. On reopen every message is checked (frame, checksum, sender, contiguous sequence
numbers); a torn tail is cut off, anything else that is damaged is refused. :meth:`Spool.ack` records the learner's
watermark durably before it deletes the segments whose messages are all acknowledged.
Only numpy and safetensors are needed (no torch): this runs on the robot.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rslkit.link import wire
from rslkit.link.segment_log import Record, SegmentLog
from rslkit.link.transitions import TransitionBatch, Transitions, TransitionSchema
from rslkit.utils.atomic_write import atomic_write_json

FORMAT = 1
STATE_FILE = "spool.json"
LOCK_FILE = "lock"
DEFAULT_SEGMENT_BYTES = 16 << 20


class Spool:
    """The transitions of one actor on disk, from :meth:`append` until the learner acknowledges them.

    Reopening a directory resumes it: same actor id, same next sequence number, same pending messages. One
    ``Spool`` at a time may have a directory open (an flock; a killed process releases it). Thread-safe.

    Args:
        directory: the spool's directory (created if missing); one per actor.
        actor_id: this actor's id, the sender of every message; a directory of another actor is refused.
        schema: the transitions' schema, checked on append; a directory written with another schema is refused.
        segment_bytes: a new segment starts when the current one would grow beyond this (acks free whole segments).
        max_message_bytes: the learner's limit on one message (:data:`rslkit.link.wire.DEFAULT_MAX_BYTES`).
    """

    def __init__(
        self,
        directory: str | Path,
        actor_id: str,
        schema: TransitionSchema,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
    ) -> None:
        if segment_bytes < 1 or max_message_bytes < wire.PREFIX_BYTES:
            raise ValueError(f"segment_bytes must be >= 1 and max_message_bytes >= {wire.PREFIX_BYTES}.")
        self.directory = Path(directory)
        self.actor_id = wire.check_name(actor_id, "actor_id")
        self.schema = schema
        self.segment_bytes, self.max_message_bytes = segment_bytes, max_message_bytes
        self._mutex = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._log = SegmentLog(self.directory, ".seg", 20, max_message_bytes)
        self._lock_fd: int | None = self._lock_directory()
        try:
            self._acked = self._open_state()
            self._log.scan()
            self._check_records()
        except BaseException:
            self._close()
            raise
        last = _last_seq(self._log.records[-1]) if self._log.records else -1
        self._next_seq = max(last, self._acked) + 1
        self._drop_acked_segments()

    # ------------------------------------------------------------------ public
    @property
    def next_seq(self) -> int:
        """The sequence number the next appended transition gets."""
        return self._next_seq

    @property
    def acked(self) -> int:
        """The learner's watermark: every seq <= this is acknowledged (-1: none yet)."""
        return self._acked

    @property
    def unacked_count(self) -> int:
        """Transitions appended and not yet acknowledged."""
        return self._next_seq - 1 - self._acked

    @property
    def disk_bytes(self) -> int:
        """Bytes in segment files (acknowledged messages that share a segment with pending ones included)."""
        return self._log.disk_bytes()

    def append(self, batch: TransitionBatch) -> int:
        """Store ``batch`` (N transitions) durably, as seqs ``next_seq .. next_seq + N - 1``; returns the last.

        The message is encoded with the checks the learner makes (:class:`rslkit.link.wire.WireError` if one
        fails: a message the learner would refuse is never spooled) and fsync'ed before this returns.
        """
        with self._mutex:
            self._check_open()
            first = self._next_seq
            seq = np.arange(first, first + len(batch), dtype=np.int64)
            message = Transitions(self.actor_id, seq, batch, self.schema)
            data = wire.encode(message, self.max_message_bytes)
            self._write(data, first, int(seq[-1]))
            self._next_seq = int(seq[-1]) + 1
            return int(seq[-1])

    def pending(self, max_bytes: int = wire.DEFAULT_MAX_BYTES) -> Iterator[tuple[int, int, bytes]]:
        """The unacknowledged messages in seq order, as ``(first_seq, last_seq, message bytes)``, ready to send.

        Yields messages until the next would bring the total beyond ``max_bytes`` (the first is always yielded).
        A message acknowledged while iterating is skipped; messages appended meanwhile come in the next call.
        """
        with self._mutex:
            self._check_open()
            records = [r for r in self._log.records if _last_seq(r) > self._acked]
        total = 0
        for record in records:
            if total and total + record.length > max_bytes:
                return
            with self._mutex:
                self._check_open()
                if _last_seq(record) <= self._acked:
                    continue
                data = self._log.read(record)
            total += record.length
            yield record.header["first_seq"], _last_seq(record), data

    def ack(self, seq: int) -> None:
        """The learner stored every seq <= ``seq``: record that durably, then delete fully acknowledged segments.

        An ack at or below the watermark is a no-op (acks may arrive late or twice).
        """
        if not isinstance(seq, (int, np.integer)) or isinstance(seq, bool):
            raise ValueError(f"ack takes an integer sequence number, got {seq!r}.")
        seq = int(seq)
        with self._mutex:
            self._check_open()
            if seq >= self._next_seq:
                raise ValueError(
                    f"ack({seq}) is beyond the last appended seq {self._next_seq - 1} of actor {self.actor_id!r}: "
                    "the learner acknowledges data this spool never wrote (two actors with one id?)."
                )
            if seq <= self._acked:
                return
            self._acked = seq
            self._write_state()
            self._drop_acked_segments()

    def close(self) -> None:
        """Close the files and release the directory; the spool can be reopened."""
        with self._mutex:
            self._close()

    def _close(self) -> None:
        self._log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ state file and lock
    def _check_open(self) -> None:
        if self._lock_fd is None:
            raise ValueError(f"the spool at {self.directory} is closed; open a new Spool.")

    def _lock_directory(self) -> int:
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(
                f"the spool at {self.directory} is open in another Spool (this or another process): "
                "one actor process per spool directory."
            ) from None
        return fd

    def _state(self) -> dict[str, Any]:
        return {"format": FORMAT, "actor_id": self.actor_id, "schema": self.schema.to_json(), "acked": self._acked}

    def _write_state(self) -> None:
        """Replace spool.json atomically and durably."""
        atomic_write_json(self.directory / STATE_FILE, self._state())

    def _open_state(self) -> int:
        """The stored watermark after checking actor id and schema; a new spool.json for a new directory."""
        path = self.directory / STATE_FILE
        if not path.exists():
            if self._log.names_on_disk():
                raise ValueError(f"{self.directory} holds segments but no {STATE_FILE}: it is damaged; move it aside.")
            self._acked = -1
            self._write_state()
            return -1
        try:
            state = json.loads(path.read_text())
            schema = TransitionSchema.from_json(state["schema"])
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is not a valid spool state ({err}); move the directory aside.") from None
        if state.get("format") != FORMAT or type(state.get("acked")) is not int or state["acked"] < -1:
            raise ValueError(f"{path} is not a spool of format {FORMAT}; move the directory aside.")
        if state.get("actor_id") != self.actor_id:
            raise ValueError(
                f"the spool at {self.directory} belongs to actor {state.get('actor_id')!r}, not {self.actor_id!r}: "
                "give each actor a directory of its own."
            )
        if schema != self.schema:
            raise ValueError(
                f"the spool at {self.directory} holds transitions of schema {schema}, not {self.schema}: send them "
                "with the old schema first, or move the directory aside."
            )
        return int(state["acked"])

    # ------------------------------------------------------------------ segments
    def _check_records(self) -> None:
        """Every message is this actor's transitions, in contiguous seqs; each segment is named by its first seq."""
        expected = None
        for record in self._log.records:
            header = record.header
            first, last = header.get("first_seq"), header.get("last_seq")
            where = f"spool segment {self._log.path(record.segment)} at byte {record.offset}"
            if header["kind"] != "transitions" or header["sender"] != self.actor_id:
                raise ValueError(f"{where} holds a {header['kind']} message from {header['sender']!r}; move it aside.")
            if record.offset == 0:  # the first segment may start at or below the watermark, each later one after
                want = self._acked + 1 if expected is None else expected
                if record.segment != want if expected is not None else record.segment > want:
                    path = self._log.path(record.segment)
                    raise ValueError(
                        f"spool segment {path} starts at seq {record.segment}, but seq {want} is the next one stored: "
                        "transitions are missing; move the directory aside."
                    )
                expected = record.segment if expected is None else expected
            if type(first) is not int or type(last) is not int or first != expected or last < first:
                raise ValueError(f"{where} holds seq {first}..{last}, expected to start at {expected}; move it aside.")
            expected = last + 1

    def _write(self, data: bytes, first: int, last: int) -> None:
        """Append one message: to the last segment, or to a new one named ``first`` when the last is full."""
        name = self._log.last_segment()
        if name is None or (self._log.segments[name] and self._log.segments[name] + len(data) > self.segment_bytes):
            self._log.start_segment(first)
        header = {"kind": "transitions", "sender": self.actor_id, "first_seq": first, "last_seq": last}
        self._log.append(data, header)

    def _drop_acked_segments(self) -> None:
        """Delete the segments before the first one that holds an unacknowledged message."""
        keep = next((r.segment for r in self._log.records if _last_seq(r) > self._acked), None)
        self._log.drop([name for name in self._log.segments if keep is None or name < keep])


def _last_seq(record: Record) -> int:
    return int(record.header["last_seq"])
