"""The learner's journal: every transition the learner acknowledges is on its disk first.

The learner acknowledges an actor's transitions once they are in its replay buffer, and the actor then deletes them.
A learner killed between two checkpoints would lose them; so the learner appends every message it stores to this
journal (fsynced) before it acknowledges it. A checkpoint records the journal segment that was current when its
snapshot was taken; a resumed learner loads the checkpoint and replays the segments from that one on (its
watermarks drop what the checkpoint already holds), so nothing acknowledged is lost and nothing is stored twice.

A journal directory holds segments ``00000000.jrn, 00000001.jrn, ...``: wire messages of kind ``transitions``
back to back, as :func:`rslkit.realworld.wire.encode` made them. Torch-free.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from rslkit.realworld import wire

SEGMENT = re.compile(r"(\d{8})\.jrn")
log = logging.getLogger(__name__)


def _segment_path(directory: Path, index: int) -> Path:
    return directory / f"{index:08d}.jrn"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Append-only, fsynced log of the transition messages the learner stored, in segments.

    Args:
        directory: created if missing. Not shared between processes (one learner per run directory).
        fsync: flush every append to the disk (turn off only for tests of speed; then an ack means "in memory").
    """

    def __init__(self, directory: str | Path, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        indices = self.segments()
        self.current = indices[-1] + 1 if indices else 0
        """The segment appends go to; a new one is started on open, so old segments are never appended to."""
        self._file = open(_segment_path(self.directory, self.current), "ab")
        if self.fsync:
            _fsync_dir(self.directory)
        self.appended_bytes = 0

    def segments(self) -> list[int]:
        """Indices of the segments on disk, in order."""
        return sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := SEGMENT.fullmatch(p.name)))

    def append(self, message: bytes) -> None:
        """Write one encoded message at the end of the current segment; durable when this returns."""
        self._file.write(message)
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self.appended_bytes += len(message)

    def rotate(self) -> int:
        """Start a new segment; returns its index (what a checkpoint taken now records as its replay start)."""
        self._file.close()
        self.current += 1
        self._file = open(_segment_path(self.directory, self.current), "ab")
        if self.fsync:
            _fsync_dir(self.directory)
        return self.current

    def drop_before(self, index: int) -> int:
        """Delete the segments older than ``index`` (a checkpoint holds their contents); returns how many."""
        old = [i for i in self.segments() if i < index]
        for i in old:
            _segment_path(self.directory, i).unlink()
        if old and self.fsync:
            _fsync_dir(self.directory)
        return len(old)

    def replay(self, start: int, schema: wire.TransitionSchema, max_bytes: int) -> Iterator[wire.Transitions]:
        """The messages of the segments ``start..`` (before the current one), in order.

        A torn message at the end of a segment (the learner was killed while appending: never acknowledged) is
        skipped with a warning; damage followed by intact data is refused.

        Raises:
            ValueError: a damaged segment, naming it and what to do.
        """
        for index in (i for i in self.segments() if start <= i < self.current):
            path = _segment_path(self.directory, index)
            data = path.read_bytes()
            offset = 0
            while offset < len(data):
                try:
                    size = wire.frame_size(data[offset : offset + wire.PREFIX_BYTES])
                    if offset + size > len(data):
                        raise wire.WireError("the last message is cut short")
                    message = wire.decode(data[offset : offset + size], schema, max_bytes)
                except wire.WireError as err:
                    if self._tail_is_torn(data, offset):
                        log.warning("journal %s: a torn last message at byte %d skipped (%s)", path, offset, err)
                        break
                    raise ValueError(
                        f"Journal segment '{path}' is damaged at byte {offset} ({err}); move the journal directory "
                        "aside and resume from the checkpoint alone (actors resend what it lacks if their spools "
                        "still hold it)."
                    ) from err
                if not isinstance(message, wire.Transitions):
                    raise ValueError(f"Journal segment '{path}' holds a {message.kind} message at byte {offset}.")
                yield message
                offset += size

    @staticmethod
    def _tail_is_torn(data: bytes, offset: int) -> bool:
        """Whether no intact frame starts after ``offset``: the damage runs to the end of the segment."""
        return wire.MAGIC not in data[offset + 1 :]

    def disk_bytes(self) -> int:
        """Bytes of all segments."""
        return sum(_segment_path(self.directory, i).stat().st_size for i in self.segments())

    def close(self) -> None:
        """Close the current segment."""
        self._file.close()
