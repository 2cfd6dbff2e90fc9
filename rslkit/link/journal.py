"""The learner's journal: every transition the learner acknowledges is on its disk first.

The learner acknowledges an actor's transitions once they are in its replay buffer, and the actor then deletes them.
A learner killed between two checkpoints would lose them; so the learner appends every message it stores to this
journal (fsynced) before it acknowledges it. A checkpoint records the journal segment that was current when its
snapshot was taken; a resumed learner loads the checkpoint and replays the segments from that one on (its
watermarks drop what the checkpoint already holds), so nothing acknowledged is lost and nothing is stored twice.

A journal directory is a :class:`~rslkit.link.segment_log.SegmentLog` (the actor's spool is one too) with segments
``00000000.jrn, 00000001.jrn, ...`` of ``transitions`` messages. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rslkit.link import wire
from rslkit.link.segment_log import SegmentLog
from rslkit.link.transitions import Transitions, TransitionSchema


class Journal:
    """Append-only, fsynced log of the transition messages the learner stored, in segments.

    Opening it cuts a torn last message off each segment (the learner was killed while appending: never
    acknowledged) and refuses damage followed by intact data (ValueError naming the segment).

    Args:
        directory: created if missing. Not shared between processes (one learner per run directory).
        fsync: flush every append to the disk (turn off only for tests of speed; then an ack means "in memory").
        max_message_bytes: the limit of one message.
    """

    def __init__(
        self, directory: str | Path, fsync: bool = True, max_message_bytes: int = wire.DEFAULT_MAX_BYTES
    ) -> None:
        self.directory = Path(directory)
        self._log = SegmentLog(self.directory, ".jrn", 8, max_message_bytes, fsync)
        try:
            self._log.scan()
        except ValueError as err:
            raise ValueError(
                f"Journal: {err} Or move the journal directory aside and resume from the checkpoint alone (actors "
                "resend what it lacks if their spools still hold it)."
            ) from None
        last = self._log.last_segment()
        self.current = 0 if last is None else last + 1
        """The segment appends go to; a new one is started on open, so old segments are never appended to."""
        self._log.start_segment(self.current)
        self.appended_bytes = 0

    @property
    def fsync(self) -> bool:
        """Whether appends are flushed to the disk."""
        return self._log.fsync

    def segments(self) -> list[int]:
        """Indices of the segments on disk, in order."""
        return self._log.names_on_disk()

    def append(self, message: bytes) -> None:
        """Write one encoded message at the end of the current segment; durable when this returns."""
        self._log.append(message, {})
        self.appended_bytes += len(message)

    def rotate(self) -> int:
        """Start a new segment; returns its index (what a checkpoint taken now records as its replay start)."""
        self.current += 1
        self._log.start_segment(self.current)
        return self.current

    def drop_before(self, index: int) -> int:
        """Delete the segments older than ``index`` (a checkpoint holds their contents); returns how many."""
        old = [i for i in self._log.segments if i < index]
        self._log.drop(old)
        return len(old)

    def replay(self, start: int, schema: TransitionSchema, max_bytes: int) -> Iterator[Transitions]:
        """The messages of the segments ``start..`` before the current one, in order, validated completely.

        Raises:
            ValueError: a message that does not decode, naming its segment.
        """
        for record in [r for r in self._log.records if start <= r.segment < self.current]:
            path = self._log.path(record.segment)
            try:
                message = wire.decode(self._log.read(record), schema, max_bytes)
            except wire.WireError as err:
                raise ValueError(
                    f"Journal segment '{path}' holds a message at byte {record.offset} that does not decode ({err}); "
                    "move the journal directory aside and resume from the checkpoint alone."
                ) from err
            if not isinstance(message, Transitions):
                raise ValueError(f"Journal segment '{path}' holds a {message.kind} message at byte {record.offset}.")
            yield message

    def disk_bytes(self) -> int:
        """Bytes of all segments."""
        return self._log.disk_bytes()

    def close(self) -> None:
        """Close the current segment."""
        self._log.close()
