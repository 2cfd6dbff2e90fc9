"""The actor's on-disk spool: each transition is on disk before it is sent, and deleted only once acknowledged.

A spool directory holds::

    spool.json                  {"format": 1, "actor_id": ..., "schema": {...}, "acked": seq} (replaced atomically)
    lock                        flock'ed while a Spool has the directory open
    00000000000000000000.seg    segments, named by the first seq they hold: wire messages of kind "transitions",
    00000000000000000512.seg    back to back, each as :func:`rslkit.realworld.wire.encode` made it

:meth:`Spool.append` writes one message and fsyncs it before it returns, so a crash (kill -9, power loss) can only
tear the message being written. On reopen every message is checked (frame, checksum, sender, contiguous sequence
numbers); a torn tail of the last segment is cut off, anything else that is damaged is refused. :meth:`Spool.ack`
records the learner's watermark durably before it deletes the segments whose messages are all acknowledged.
Only numpy and safetensors are needed (no torch): this runs on the robot.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rslkit.realworld import wire

FORMAT = 1
STATE_FILE = "spool.json"
LOCK_FILE = "lock"
SEGMENT = re.compile(r"(\d{20})\.seg")
DEFAULT_SEGMENT_BYTES = 16 << 20
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Record:
    segment: int  # the segment's name: the first seq it holds
    offset: int
    length: int
    first_seq: int
    last_seq: int


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}.seg"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Spool:
    """The transitions of one actor on disk, from :meth:`append` until the learner acknowledges them.

    Reopening a directory resumes it: same actor id, same next sequence number, same pending messages. One
    ``Spool`` at a time may have a directory open (an flock; a killed process releases it). Thread-safe.

    Args:
        directory: the spool's directory (created if missing); one per actor.
        actor_id: this actor's id, the sender of every message; a directory of another actor is refused.
        schema: the transitions' schema, checked on append; a directory written with another schema is refused.
        segment_bytes: a new segment starts when the current one would grow beyond this (acks free whole segments).
        max_message_bytes: the learner's limit on one message (:data:`rslkit.realworld.wire.DEFAULT_MAX_BYTES`).
    """

    def __init__(
        self,
        directory: str | Path,
        actor_id: str,
        schema: wire.TransitionSchema,
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
        self._fd: int | None = None  # the last segment, open for appending
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = self._lock_directory()
        try:
            self._acked = self._open_state()
            self._segments: dict[int, int] = {}  # name -> size in bytes, in seq order
            self._records: list[_Record] = []
            self._scan()
        except BaseException:
            self._close()
            raise
        last = self._records[-1].last_seq if self._records else -1
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
        return sum(self._segments.values())

    def append(self, batch: wire.TransitionBatch) -> int:
        """Store ``batch`` (N transitions) durably, as seqs ``next_seq .. next_seq + N - 1``; returns the last.

        The message is encoded with the checks the learner makes (:class:`rslkit.realworld.wire.WireError` if one
        fails: a message the learner would refuse is never spooled) and fsync'ed before this returns.
        """
        with self._mutex:
            self._check_open()
            first = self._next_seq
            seq = np.arange(first, first + len(batch), dtype=np.int64)
            message = wire.Transitions(self.actor_id, seq, batch, self.schema)
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
            records = [r for r in self._records if r.last_seq > self._acked]
        total = 0
        for record in records:
            if total and total + record.length > max_bytes:
                return
            with self._mutex:
                self._check_open()
                if record.last_seq <= self._acked:
                    continue
                data = self._read(record)
            total += record.length
            yield record.first_seq, record.last_seq, data

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
        for fd in (self._fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._lock_fd = None

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
        """Replace spool.json atomically: write a temporary file, fsync it, rename it over, fsync the directory."""
        tmp = self.directory / (STATE_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, json.dumps(self._state(), sort_keys=True).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.directory / STATE_FILE)
        _fsync_dir(self.directory)

    def _open_state(self) -> int:
        """The stored watermark after checking actor id and schema; a new spool.json for a new directory."""
        path = self.directory / STATE_FILE
        if not path.exists():
            if any(SEGMENT.fullmatch(p.name) for p in self.directory.iterdir()):
                raise ValueError(f"{self.directory} holds segments but no {STATE_FILE}: it is damaged; move it aside.")
            self._acked = -1
            self._write_state()
            return -1
        try:
            state = json.loads(path.read_text())
            schema = wire.TransitionSchema.from_json(state["schema"])
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
    def _scan(self) -> None:
        """Index every message of every segment; cut a torn tail off the last segment; drop empty segments."""
        names = sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := SEGMENT.fullmatch(p.name)))
        changed = False
        for i, name in enumerate(names):
            path = self.directory / _segment_name(name)
            data = path.read_bytes()
            # the first segment may start at or below the watermark; each later one where the previous one ended
            want = self._records[-1].last_seq + 1 if self._records else self._acked + 1
            if data and (name != want if self._records else name > want):
                raise ValueError(
                    f"spool segment {path} starts at seq {name}, but seq {want} is the next one stored: "
                    "transitions are missing; move the directory aside."
                )
            size = self._index_segment(name, data, last=i == len(names) - 1)
            if size < len(data):
                log.warning("spool %s: dropped a torn tail of %d bytes", path, len(data) - size)
                with open(path, "r+b") as f:
                    f.truncate(size)
                    os.fsync(f.fileno())
            if size == 0:
                path.unlink()
            else:
                self._segments[name] = size
            changed = changed or size < len(data) or size == 0
        if changed:
            _fsync_dir(self.directory)

    def _index_segment(self, name: int, data: bytes, last: bool) -> int:
        """Append the records of one segment to the index; returns the size of its intact part."""
        offset, expected = 0, name
        while offset < len(data):
            try:
                end = offset + wire.frame_size(data[offset : offset + wire.PREFIX_BYTES])
                header = wire.read_header(data[offset:end], self.max_message_bytes)
            except wire.WireError as err:
                if last and not self._prefix_ok(data, offset, len(data)) and not self._intact_after(data, offset):
                    return offset  # torn: the message being written when the process died
                raise ValueError(
                    f"spool segment {self.directory / _segment_name(name)} is damaged at byte {offset} ({err}), "
                    "not at its tail: move the directory aside."
                ) from None
            first, last_seq = self._check_record(header, expected, name, offset)
            self._records.append(_Record(name, offset, end - offset, first, last_seq))
            offset, expected = end, last_seq + 1
        return offset

    @staticmethod
    def _prefix_ok(data: bytes, offset: int, size: int) -> bool:
        """Whether the message at ``offset`` has a readable prefix and ends before ``size``: then it is no torn tail.

        A torn tail is the message being written at a crash: a short prefix, or one declaring an end at or past EOF.
        """
        try:
            return offset + wire.frame_size(data[offset : offset + wire.PREFIX_BYTES]) < size
        except wire.WireError:
            return False

    def _intact_after(self, data: bytes, offset: int) -> bool:
        """Whether an intact message starts somewhere after ``offset``: then the damage is no torn tail."""
        start = data.find(wire.MAGIC, offset + 1)
        while start >= 0:
            try:
                end = start + wire.frame_size(data[start : start + wire.PREFIX_BYTES])
                wire.read_header(data[start:end], self.max_message_bytes)
                return True
            except wire.WireError:
                start = data.find(wire.MAGIC, start + 1)
        return False

    def _check_record(self, header: dict[str, Any], expected: int, name: int, offset: int) -> tuple[int, int]:
        first, last = header.get("first_seq"), header.get("last_seq")
        where = f"spool segment {self.directory / _segment_name(name)} at byte {offset}"
        if header["kind"] != "transitions" or header["sender"] != self.actor_id:
            raise ValueError(f"{where} holds a {header['kind']} message from {header['sender']!r}; move it aside.")
        if type(first) is not int or type(last) is not int or first != expected or last < first:
            raise ValueError(f"{where} holds seq {first}..{last}, expected to start at {expected}; move it aside.")
        return first, last

    def _active_segment(self, size: int) -> int:
        """The segment the next ``size`` bytes go to, opened for appending (a new one when the last is full)."""
        if self._segments:
            name = next(reversed(self._segments))
            if self._segments[name] == 0 or self._segments[name] + size <= self.segment_bytes:
                if self._fd is None:
                    self._fd = os.open(self.directory / _segment_name(name), os.O_WRONLY | os.O_APPEND)
                return name
        if self._fd is not None:
            os.close(self._fd)
        name = self._next_seq
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL
        self._fd = os.open(self.directory / _segment_name(name), flags, 0o644)
        _fsync_dir(self.directory)  # the new file's name is durable before a message in it is reported stored
        self._segments[name] = 0
        return name

    def _write(self, data: bytes, first: int, last: int) -> None:
        name = self._active_segment(len(data))
        assert self._fd is not None
        start = self._segments[name]
        try:
            _write_all(self._fd, data)
            os.fsync(self._fd)
        except BaseException:
            try:
                os.ftruncate(self._fd, start)  # leave no partial message behind a later one
            except OSError:
                self._close()  # the tail is unknown: a reopen cuts it off as a torn tail
            raise
        self._segments[name] = start + len(data)
        self._records.append(_Record(name, start, len(data), first, last))

    def _read(self, record: _Record) -> bytes:
        with open(self.directory / _segment_name(record.segment), "rb") as f:
            f.seek(record.offset)
            data = f.read(record.length)
        if len(data) != record.length:
            raise ValueError(f"spool segment {record.segment} was truncated behind this Spool's back.")
        return data

    def _drop_acked_segments(self) -> None:
        """Delete the segments before the first one that holds an unacknowledged message."""
        keep = next((r.segment for r in self._records if r.last_seq > self._acked), None)
        doomed = [name for name in self._segments if keep is None or name < keep]
        if not doomed:
            return
        if self._fd is not None and next(reversed(self._segments)) in doomed:
            os.close(self._fd)
            self._fd = None
        for name in doomed:
            (self.directory / _segment_name(name)).unlink()
            del self._segments[name]
        self._records = [r for r in self._records if r.segment not in doomed]
        _fsync_dir(self.directory)
