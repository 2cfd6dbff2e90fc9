"""The one spool writer: rows off the control loop into the spool, rewards replaced on the way, episode numbers kept
across restarts; a slow disk makes ``wait`` wait and ``drop`` drop (counted), a refused batch is counted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from rslkit.link import wire
from rslkit.link.episodes import EpisodeNumbers
from rslkit.link.spool import Spool
from rslkit.link.spool_writer import SpoolWriter
from rslkit.link.transitions import Row, TransitionBatch, Transitions, TransitionSchema, stack

SCHEMA = TransitionSchema({"policy": wire.ArraySpec((3,), "float32")}, wire.ArraySpec((1,), "float32"))


def rows(n: int, episode: int = 0) -> list[Row]:
    zeros, ones = np.zeros(3, np.float32), np.ones(3, np.float32)
    return [
        Row({"policy": zeros}, np.zeros(1, np.float32), 0.0, k == n - 1, False, {"policy": ones}, episode, k, 1, False)
        for k in range(n)
    ]


def test_rewards_are_replaced_and_failures_are_counted(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "a", "actor-0", SCHEMA)
    writer = SpoolWriter(spool, reward_fn=lambda b: b.next_obs["policy"].sum(1))  # a "success classifier"
    writer.submit(rows(5))
    writer.close()
    assert writer.spooled == 5 and writer.idle() and writer.error is None
    ((_, _, message),) = list(spool.pending())
    decoded = wire.decode(message, SCHEMA)
    assert isinstance(decoded, Transitions)
    np.testing.assert_array_equal(decoded.batch.reward, np.full(5, 3.0, np.float32))
    spool.close()
    bad = SpoolWriter(Spool(tmp_path / "b", "actor-0", SCHEMA), reward_fn=lambda b: np.zeros(2))
    bad.submit(rows(5))
    bad.close()
    assert bad.refused == 5 and bad.spooled == 0 and "reward function returned shape" in str(bad.error)
    nan = rows(2)
    nan[0] = nan[0]._replace(reward=float("nan"))
    refused = SpoolWriter(Spool(tmp_path / "c", "actor-0", SCHEMA))
    refused.submit(nan)
    refused.close()
    assert refused.refused == 2 and "non-finite" in str(refused.error)


def test_episode_numbers_survive_a_restart(tmp_path: Path) -> None:
    with Spool(tmp_path / "s", "robot-1", SCHEMA) as spool:
        writer = SpoolWriter(spool, episodes=EpisodeNumbers(tmp_path / "s" / "episodes.json"))
        writer.submit(rows(3, episode=0))
        writer.submit(rows(2, episode=1))
        writer.close()
        assert writer.spooled == 5 and spool.unacked_count == 5
    assert EpisodeNumbers(tmp_path / "s" / "episodes.json").next_episode == 2  # a restart numbers from 2


class GatedSpool:
    """A spool whose disk hangs until ``gate`` is set."""

    actor_id = "robot-1"
    schema = SCHEMA

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.appended = 0

    def append(self, batch: TransitionBatch) -> int:
        self.gate.wait(10)
        self.appended += len(batch)
        return self.appended - 1


def test_drop_never_blocks_submit_and_overflow_is_counted() -> None:
    spool = GatedSpool()
    writer = SpoolWriter(spool, when_full="drop", max_buffered=50)  # type: ignore[arg-type]
    took = []
    for k in range(20):
        start = time.perf_counter()
        writer.submit([r._replace(step=10 * k + i) for i, r in enumerate(rows(10))])
        took.append(time.perf_counter() - start)
    assert max(took) < 0.05
    assert writer.buffered == 50 and writer.dropped == 150  # 5 batches wait (one of them at the hung disk)
    spool.gate.set()
    writer.close()
    assert spool.appended == 50 and writer.buffered == 0
    assert len(stack(rows(2), SCHEMA)) == 2


def test_wait_blocks_submit_until_the_disk_catches_up_and_loses_nothing() -> None:
    spool = GatedSpool()
    writer = SpoolWriter(spool, when_full="wait", max_buffered=20)  # type: ignore[arg-type]
    writer.submit(rows(10))
    writer.submit(rows(10, episode=1))
    threading.Timer(0.3, spool.gate.set).start()
    start = time.perf_counter()
    writer.submit(rows(10, episode=2))  # waits for room
    assert time.perf_counter() - start >= 0.2 and writer.put_wait_s >= 0.2
    writer.close()
    assert spool.appended == 30 and writer.dropped == 0
