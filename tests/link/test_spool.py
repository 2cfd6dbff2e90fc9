"""The actor's spool: append / pending / ack / reopen, torn tails cut at every offset, damage and misuse refused."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from wire_samples import SCHEMA, make_batch, mutate_bytes, same

from rslkit.link import wire
from rslkit.link.spool import Spool
from rslkit.link.transitions import TransitionBatch, Transitions, TransitionSchema


def _fill(directory: Path, sizes: list[int], segment_bytes: int = 1 << 20) -> list[TransitionBatch]:
    rng = np.random.default_rng(0)
    batches = [make_batch(n, rng, episode=i) for i, n in enumerate(sizes)]
    with Spool(directory, "actor-0", SCHEMA, segment_bytes=segment_bytes) as spool:
        for batch in batches:
            spool.append(batch)
    return batches


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.seg"))


def _seqs(spool: Spool) -> list[int]:
    out: list[int] = []
    for first, last, data in spool.pending():
        message = wire.decode(data, SCHEMA)
        assert isinstance(message, Transitions)
        assert (int(message.seq[0]), int(message.seq[-1])) == (first, last)
        out += message.seq.tolist()
    return out


def test_append_pending_ack_and_reopen(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    batches = [make_batch(2, rng, episode=i) for i in range(5)]
    spool = Spool(tmp_path, "actor-0", SCHEMA, segment_bytes=3000)  # two messages per segment
    assert [spool.append(b) for b in batches] == [1, 3, 5, 7, 9]
    assert (spool.next_seq, spool.unacked_count, len(_segments(tmp_path))) == (10, 10, 3)
    for (first, last, data), batch in zip(spool.pending(), batches, strict=True):
        expected = Transitions("actor-0", np.arange(first, last + 1), batch, SCHEMA)
        assert same(wire.decode(data, SCHEMA), expected)

    size = spool.disk_bytes
    spool.ack(4)  # mid-message: 4..5 is sent again, the learner drops the repeat by its key
    assert [p[:2] for p in spool.pending()] == [(4, 5), (6, 7), (8, 9)]
    assert len(_segments(tmp_path)) == 2 and spool.disk_bytes < size and spool.unacked_count == 5
    pending = list(spool.pending())
    spool.close()
    with pytest.raises(ValueError, match="closed"):
        spool.append(batches[0])

    spool = Spool(tmp_path, "actor-0", SCHEMA, segment_bytes=3000)
    assert (spool.next_seq, spool.acked, list(spool.pending())) == (10, 4, pending)
    spool.ack(2)  # late or repeated acks change nothing
    assert spool.acked == 4
    with pytest.raises(ValueError, match=r"ack\(10\) is beyond the last appended seq 9"):
        spool.ack(10)
    spool.ack(np.int64(9))
    assert (_segments(tmp_path), spool.disk_bytes, list(spool.pending())) == ([], 0, [])
    spool.close()

    with Spool(tmp_path, "actor-0", SCHEMA, segment_bytes=3000) as spool:  # acked data is never resent
        assert (spool.next_seq, spool.unacked_count, list(spool.pending())) == (10, 0, [])
        assert spool.append(batches[0]) == 11 and _seqs(spool) == [10, 11]


def test_pending_stops_at_max_bytes_but_yields_at_least_one(tmp_path: Path) -> None:
    _fill(tmp_path, [2, 2, 2, 2])
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:
        sizes = [len(d) for _, _, d in spool.pending()]
        assert len(list(spool.pending(max_bytes=1))) == 1
        assert len(list(spool.pending(max_bytes=sizes[0] + sizes[1] + sizes[2] // 2))) == 2
        records = spool.pending()
        assert next(records)[:2] == (0, 1)
        spool.ack(3)  # acknowledged while iterating: skipped
        assert [r[:2] for r in records] == [(4, 5), (6, 7)]


def test_append_refuses_a_batch_the_learner_would_refuse(tmp_path: Path) -> None:
    batch = make_batch(3, np.random.default_rng(0))
    batch.reward[1] = np.nan
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:
        with pytest.raises(wire.WireError, match="'reward' holds 1 non-finite"):
            spool.append(batch)
        assert (spool.next_seq, spool.disk_bytes) == (0, 0)


def test_refuses_another_actor_another_schema_and_a_second_opener(tmp_path: Path) -> None:
    _fill(tmp_path, [1])
    with pytest.raises(ValueError, match="belongs to actor 'actor-0', not 'actor-1': give each actor a directory"):
        Spool(tmp_path, "actor-1", SCHEMA)
    other = TransitionSchema(dict(SCHEMA.obs), wire.ArraySpec((3,), "float32"))
    with pytest.raises(ValueError, match="holds transitions of schema"):
        Spool(tmp_path, "actor-0", other)
    with pytest.raises(wire.WireError, match="actor_id must be"):
        Spool(tmp_path, "actor 0", SCHEMA)
    with Spool(tmp_path, "actor-0", SCHEMA):
        with pytest.raises(ValueError, match="open in another Spool"):
            Spool(tmp_path, "actor-0", SCHEMA)
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:  # released on close
        assert spool.next_seq == 1


def test_a_torn_last_message_is_dropped_at_every_offset(tmp_path: Path) -> None:
    """Cut the last segment inside its last message (a kill -9 or power loss mid-write): only that one is lost."""
    _fill(tmp_path, [2, 2, 2, 2, 1])
    (segment,) = _segments(tmp_path)
    full = segment.read_bytes()
    starts = [0]
    while starts[-1] < len(full):
        starts.append(starts[-1] + wire.frame_size(full[starts[-1] : starts[-1] + wire.PREFIX_BYTES]))
    begin = starts[-2]  # the last message: full[begin:]
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:
        kept = list(spool.pending())[:-1]
    # every offset of the prefix and the start of the header, then every 11th: ~150 reopens, each with an fsync
    cuts = sorted({*range(begin, begin + 64), *range(begin + 64, len(full), 11), len(full) - 1})
    for i, cut in enumerate(cuts):
        segment.write_bytes(full[:cut])
        with Spool(tmp_path, "actor-0", SCHEMA) as spool:
            assert (spool.next_seq, list(spool.pending())) == (8, kept), f"cut at {cut}"
            assert segment.stat().st_size == begin
            if i % 25 == 0:  # the sequence goes on after the last intact message
                assert spool.append(make_batch(1, np.random.default_rng(i))) == 8
                assert _seqs(spool) == list(range(9))
    corrupt = bytearray(full)
    corrupt[-1] ^= 0xFF  # complete length, wrong checksum, at the end of the file: torn by a power loss
    segment.write_bytes(bytes(corrupt))
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:
        assert list(spool.pending()) == kept


def test_damage_that_is_not_a_torn_tail_is_refused(tmp_path: Path) -> None:
    _fill(tmp_path, [2, 2, 2, 2, 2, 2], segment_bytes=3000)  # three segments of two messages
    first, middle, last = _segments(tmp_path)
    for path in (first, last):  # inside the first message of a segment: more messages follow it
        original = path.read_bytes()
        path.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
        with pytest.raises(ValueError, match="is damaged at byte 0"):
            Spool(tmp_path, "actor-0", SCHEMA)
        path.write_bytes(original)
    original = last.read_bytes()
    last.write_bytes(b"XXXX" + original[4:])  # an unreadable prefix, but an intact message follows: no torn tail
    with pytest.raises(ValueError, match="is damaged at byte 0"):
        Spool(tmp_path, "actor-0", SCHEMA)
    last.write_bytes(original)
    middle.unlink()
    with pytest.raises(ValueError, match="starts at seq 8, but seq 4 is the next one stored"):
        Spool(tmp_path, "actor-0", SCHEMA)


def test_a_crash_between_the_ack_and_the_deletion_resumes_after_the_ack(tmp_path: Path) -> None:
    _fill(tmp_path, [2, 2, 2, 2], segment_bytes=3000)
    state = json.loads((tmp_path / "spool.json").read_text())
    (tmp_path / "spool.json").write_text(json.dumps(state | {"acked": 5}))  # the watermark landed, the unlink not
    with Spool(tmp_path, "actor-0", SCHEMA, segment_bytes=3000) as spool:
        assert (spool.acked, _seqs(spool), len(_segments(tmp_path))) == (5, [6, 7], 1)


def test_a_failed_write_leaves_no_partial_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(tmp_path, [2])
    batch = make_batch(2, np.random.default_rng(1))
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:
        size, real_fsync = spool.disk_bytes, os.fsync

        def disk_full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", disk_full)
        with pytest.raises(OSError, match="No space left"):
            spool.append(batch)
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert (spool.next_seq, spool.disk_bytes, _segments(tmp_path)[0].stat().st_size) == (2, size, size)
        assert spool.append(batch) == 3 and _seqs(spool) == [0, 1, 2, 3]


def test_random_damage_is_refused_or_cut_off_never_misread(tmp_path: Path) -> None:
    """120 seeded byte mutations of one segment: reopening raises ValueError or yields only original messages."""
    _fill(tmp_path, [2, 1, 2, 1, 2, 1], segment_bytes=4000)  # three segments of two messages
    with Spool(tmp_path, "actor-0", SCHEMA) as spool:
        originals = [data for _, _, data in spool.pending()]
    segments = {path: path.read_bytes() for path in _segments(tmp_path)}
    r = random.Random(3)
    for case in range(120):
        path = r.choice(sorted(segments))
        path.write_bytes(mutate_bytes(segments[path], r))
        try:
            with Spool(tmp_path, "actor-0", SCHEMA) as spool:
                pending = [data for _, _, data in spool.pending()]
                assert _seqs(spool) == list(range(spool.next_seq)), f"case {case}"
        except ValueError:
            pass
        else:
            assert pending == originals[: len(pending)], f"case {case}: a message changed"
        for original, data in segments.items():  # restore every segment (a reopen may have cut or deleted one)
            original.write_bytes(data)
