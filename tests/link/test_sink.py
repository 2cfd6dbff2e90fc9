"""The learner drops a resent transition by its seq and by its (actor, episode, step) key, as docs/realworld.md says;
watermarks survive a checkpoint (and read an older checkpoint's seqs-only form)."""

from __future__ import annotations

import numpy as np
from wire_samples import SCHEMA, make_batch

from rslkit.link.sink import MemorySink, Watermarks
from rslkit.link.transitions import Transitions


def message(first_seq: int, n: int, episode: int, first_step: int = 0) -> Transitions:
    batch = make_batch(n, np.random.default_rng(first_seq), episode=episode, start_step=first_step)
    return Transitions("actor-0", np.arange(first_seq, first_seq + n, dtype=np.int64), batch, SCHEMA)


def test_resends_are_dropped_by_seq_and_by_key() -> None:
    sink = MemorySink()
    assert sink("actor-0", message(0, 5, episode=0)) == 4
    assert sink("actor-0", message(3, 4, episode=0, first_step=3)) == 6  # seqs 3, 4 again: dropped by seq
    # the same (episode, step) keys under new seqs (a spool replayed from a copy): dropped by key
    assert sink("actor-0", message(7, 7, episode=0, first_step=0)) == 13
    assert sink.count() == 7 and sink.duplicates == 2 + 7
    assert sink("actor-0", message(14, 3, episode=1)) == 16 and sink.count() == 10  # new keys are stored


def test_watermarks_round_trip_a_checkpoint_and_read_the_old_form() -> None:
    marks = Watermarks()
    marks.advance("a", 9, np.array([0, 0]), np.array([3, 4]))
    restored = Watermarks(marks.snapshot())
    new = restored.new_rows("a", np.array([10, 11]), np.array([0, 0]), np.array([4, 5]))
    assert new.tolist() == [False, True] and restored.get("a") == 9
    assert Watermarks({"a": 9}).get("a") == 9  # a checkpoint written before keys were kept
