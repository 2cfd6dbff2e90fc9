"""The learner's journal: messages come back in order from the segments a checkpoint does not cover; a torn last
message (a kill while appending, never acknowledged) is skipped, damage followed by intact data is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wire_samples import SCHEMA, make_batch

from rslkit.link import wire
from rslkit.link.journal import Journal
from rslkit.link.transitions import Transitions


def message(seq0: int, n: int, rng: np.random.Generator) -> bytes:
    seq = np.arange(seq0, seq0 + n, dtype=np.int64)
    return wire.encode(Transitions("actor-0", seq, make_batch(n, rng, episode=seq0), SCHEMA))


def seqs(journal: Journal, start: int = 0) -> list[int]:
    return [int(s) for m in journal.replay(start, SCHEMA, wire.DEFAULT_MAX_BYTES) for s in m.seq]


def test_replay_returns_the_segments_from_a_checkpoint_on(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    journal = Journal(tmp_path, fsync=False)
    journal.append(message(0, 3, rng))
    start = journal.rotate()  # a checkpoint taken here holds seqs 0-2
    journal.append(message(3, 2, rng))
    journal.append(message(5, 4, rng))
    journal.close()
    reopened = Journal(tmp_path, fsync=False)  # a resumed learner: a new segment for its own appends
    assert seqs(reopened) == list(range(9))
    assert seqs(reopened, start) == list(range(3, 9))
    assert reopened.drop_before(start) == 1 and seqs(reopened) == list(range(3, 9))
    assert reopened.disk_bytes() > 0


@pytest.mark.parametrize("cut", [1, 23, 24, 100, -1])
def test_a_torn_last_message_is_skipped(tmp_path: Path, cut: int) -> None:
    rng = np.random.default_rng(1)
    journal = Journal(tmp_path, fsync=False)
    journal.append(message(0, 3, rng))
    last = message(3, 3, rng)
    journal.append(last[: cut if cut > 0 else len(last) + cut])
    journal.close()
    assert seqs(Journal(tmp_path, fsync=False)) == [0, 1, 2]


def test_damage_before_intact_data_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    journal = Journal(tmp_path, fsync=False)
    first = bytearray(message(0, 3, rng))
    first[40] ^= 0xFF  # a flipped bit in the first message, an intact one after it
    journal.append(bytes(first))
    journal.append(message(3, 3, rng))
    journal.close()
    with pytest.raises(ValueError, match="damaged at byte 0"):
        seqs(Journal(tmp_path, fsync=False))
