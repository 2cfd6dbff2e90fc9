"""One fsynced log of wire messages in segment files: the actor's spool and the learner's journal are both one.

A log directory holds segment files named by an integer (``00000000000000000512.seg``: the spool names a segment
by the first seq it holds, the journal numbers them ``00000000.jrn, 00000001.jrn, ...``), each a sequence of
:mod:`rslkit.link.wire` frames back to back. :meth:`SegmentLog.append` writes one frame and fsyncs it before it
returns, so a crash (kill -9, power loss) can only tear the frame being written. On open every frame is indexed
(prefix, checksum and header checked); a torn tail (the frame being written at a crash) is cut off, damage followed
by intact data is refused. Torch-free.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rslkit.link import wire
from rslkit.utils.atomic_write import fsync_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """Where one frame of the log is: its segment's name, byte offset and length, and its checked header."""

    segment: int
    offset: int
    length: int
    header: dict[str, Any]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class SegmentLog:
    """Append-only frames in segment files, indexed in memory (see module doc). Not thread-safe: its owner locks.

    Args:
        directory: created if missing.
        suffix: of segment files (``.seg``, ``.jrn``).
        digits: width of the zero-padded segment names.
        max_message_bytes: the limit of one frame.
        fsync: flush every append (and new or deleted files) to the disk; off only for tests of speed.
    """

    def __init__(
        self,
        directory: str | Path,
        suffix: str,
        digits: int,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
        fsync: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.suffix, self.digits, self.max_message_bytes, self.fsync = suffix, digits, max_message_bytes, fsync
        self._pattern = re.compile(rf"(\d{{{digits}}}){re.escape(suffix)}")
        self.segments: dict[int, int] = {}
        """Segment name -> size in bytes, in order."""
        self.records: list[Record] = []
        """Every frame of every segment, in order."""
        self._fd: int | None = None  # the last segment, open for appending

    # ------------------------------------------------------------------ files
    def path(self, name: int) -> Path:
        """The file of segment ``name``."""
        return self.directory / f"{name:0{self.digits}d}{self.suffix}"

    def names_on_disk(self) -> list[int]:
        """The names of the segment files in the directory, in order."""
        return sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := self._pattern.fullmatch(p.name)))

    def _sync_dir(self) -> None:
        if self.fsync:
            fsync_dir(self.directory)

    # ------------------------------------------------------------------ open
    def scan(self) -> None:
        """Index every frame of every segment; cut a torn tail off a segment; delete empty segments.

        Raises:
            ValueError: damage that is not a torn tail, naming the segment and the byte.
        """
        changed = False
        for name in self.names_on_disk():
            path = self.path(name)
            data = path.read_bytes()
            size = self._index(name, data)
            if size < len(data):
                log.warning("%s: dropped a torn tail of %d bytes", path, len(data) - size)
                with open(path, "r+b") as f:
                    f.truncate(size)
                    if self.fsync:
                        os.fsync(f.fileno())
            if size == 0:
                path.unlink()
            else:
                self.segments[name] = size
            changed = changed or size < len(data) or size == 0
        if changed:
            self._sync_dir()

    def _index(self, name: int, data: bytes) -> int:
        """Append the records of one segment to the index; returns the size of its intact part."""
        offset = 0
        while offset < len(data):
            try:
                end = offset + wire.frame_size(data[offset : offset + wire.PREFIX_BYTES])
                header = wire.read_header(data[offset:end], self.max_message_bytes)
            except wire.WireError as err:
                if not self._complete(data, offset) and not self._intact_after(data, offset):
                    return offset  # torn: the frame being written when the process died
                raise ValueError(
                    f"segment {self.path(name)} is damaged at byte {offset} ({err}), not at its tail: move the "
                    "directory aside."
                ) from None
            self.records.append(Record(name, offset, end - offset, header))
            offset = end
        return offset

    @staticmethod
    def _complete(data: bytes, offset: int) -> bool:
        """Whether the frame at ``offset`` has a readable prefix and ends before the end of ``data``: then it is no
        torn tail (a torn tail is a short prefix, or one declaring an end at or past the end of the file)."""
        try:
            return offset + wire.frame_size(data[offset : offset + wire.PREFIX_BYTES]) < len(data)
        except wire.WireError:
            return False

    def _intact_after(self, data: bytes, offset: int) -> bool:
        """Whether an intact frame starts somewhere after ``offset``: then the damage is no torn tail."""
        start = data.find(wire.MAGIC, offset + 1)
        while start >= 0:
            try:
                end = start + wire.frame_size(data[start : start + wire.PREFIX_BYTES])
                wire.read_header(data[start:end], self.max_message_bytes)
                return True
            except wire.WireError:
                start = data.find(wire.MAGIC, start + 1)
        return False

    # ------------------------------------------------------------------ append, read, drop
    def start_segment(self, name: int) -> None:
        """Appends go to a new segment ``name`` from now on (its name is durable before anything is in it)."""
        self.close()
        if self.segments and name <= next(reversed(self.segments)):
            raise ValueError(f"segment {name} does not follow segment {next(reversed(self.segments))}.")
        self._fd = os.open(self.path(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        self._sync_dir()
        self.segments[name] = 0

    def last_segment(self) -> int | None:
        """The segment appends go to (None before the first)."""
        return next(reversed(self.segments)) if self.segments else None

    def append(self, data: bytes, header: dict[str, Any]) -> Record:
        """Write the frame ``data`` (its checked ``header``) at the end of the last segment; durable when this
        returns. A failed write leaves no partial frame behind (or closes the log: a reopen cuts it off)."""
        name = self.last_segment()
        if name is None:
            raise ValueError("start a segment before the first append.")
        if self._fd is None:
            self._fd = os.open(self.path(name), os.O_WRONLY | os.O_APPEND)
        start = self.segments[name]
        try:
            _write_all(self._fd, data)
            if self.fsync:
                os.fsync(self._fd)
        except BaseException:
            try:
                os.ftruncate(self._fd, start)  # leave no partial frame behind a later one
            except OSError:
                self.close()  # the tail is unknown: a reopen cuts it off as a torn tail
            raise
        self.segments[name] = start + len(data)
        record = Record(name, start, len(data), header)
        self.records.append(record)
        return record

    def read(self, record: Record) -> bytes:
        """The bytes of the frame ``record``."""
        with open(self.path(record.segment), "rb") as f:
            f.seek(record.offset)
            data = f.read(record.length)
        if len(data) != record.length:
            raise ValueError(f"segment {self.path(record.segment)} was truncated behind this log's back.")
        return data

    def drop(self, names: list[int]) -> None:
        """Delete the segments ``names`` and their records."""
        if not names:
            return
        if self._fd is not None and self.last_segment() in names:
            self.close()
        for name in names:
            self.path(name).unlink()
            del self.segments[name]
        doomed = set(names)
        self.records = [r for r in self.records if r.segment not in doomed]
        self._sync_dir()

    def disk_bytes(self) -> int:
        """Bytes in segment files."""
        return sum(self.segments.values())

    def close(self) -> None:
        """Close the open segment (the log can go on: the next append reopens it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
