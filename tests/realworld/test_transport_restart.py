"""The learner dies, hangs or restarts under a streaming actor: after reconnecting every transition the actor produced
is in the learner's store exactly once (counted by its (actor, episode, step) key), the actor's spool empties, and the
actor's appends never wait for the network. The learner's store is file-backed (FileSink), as a learner restoring
its buffer from a checkpoint would be."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from transport_helpers import FAST, FileSink, fill, needs_netns, serve, wait_until

from rslkit.link.client import ActorClient
from rslkit.link.spool import Spool
from tests.link.wire_samples import SCHEMA

pytestmark = [needs_netns, pytest.mark.timeout(90)]
LEARNER = Path(__file__).resolve().parent / "learner_proc.py"


class LearnerProcess:
    """``learner_proc.py`` in a child process, serving 127.0.0.1:``port`` into a FileSink at ``store``."""

    def __init__(self, port: int, store: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(LEARNER), str(port), str(store), "60"], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=30):
                self.kill()
                raise AssertionError("the learner process did not start within 30 s")
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"], f"the learner process said {line!r}"
        self.port = int(line[1])

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _stored(store: Path) -> Counter[tuple[str, int, int]]:
    sink = FileSink(store)
    sink.close()
    return sink.keys


def test_learner_stopped_mid_stream_and_restarted_on_its_port(tmp_path: Path) -> None:
    store, rng = tmp_path / "store.jsonl", np.random.default_rng(0)
    sink = FileSink(store)
    server = serve(sink)
    keys: Counter[tuple[str, int, int]] = Counter()
    with Spool(tmp_path / "s", "actor-0", SCHEMA, segment_bytes=8192) as spool:
        client = ActorClient(server.address, "actor-0", spool, config=FAST)
        for episode in range(120):
            keys += fill(spool, 1, rng, start_episode=episode)
            if episode in (40, 80):  # stopped with whatever is in flight; the actor goes on appending
                server.stop(0)
                sink.close()
            if episode in (50, 90):
                sink = FileSink(store)
                server = serve(sink, server.port)
            time.sleep(0.003)
        wait_until(lambda: spool.unacked_count == 0 == spool.disk_bytes, 15, "every transition acknowledged, deleted")
        assert client.status().failures >= 2
        client.close()
    server.stop(0)
    sink.close()
    assert _stored(store) == keys, "each transition stored exactly once"


def test_learner_process_killed_and_restarted_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    store, rng = tmp_path / "store.jsonl", np.random.default_rng(1)
    learner = LearnerProcess(0, store)
    port, in_flight = learner.port, []
    keys: Counter[tuple[str, int, int]] = Counter()
    with Spool(tmp_path / "s", "actor-0", SCHEMA, segment_bytes=8192) as spool:
        client = ActorClient(f"127.0.0.1:{port}", "actor-0", spool, config=FAST)
        try:
            for episode in range(150):
                keys += fill(spool, 1, rng, start_episode=episode)
                if episode in (30, 70, 110):
                    in_flight.append(spool.unacked_count)
                    learner.kill()  # SIGKILL, mid-stream
                if episode in (40, 80, 120):
                    learner = LearnerProcess(port, store)
                time.sleep(0.003)
            wait_until(lambda: spool.unacked_count == 0, 20, "every transition acknowledged by the last learner")
            assert client.status().failures >= len(in_flight)
            assert max(in_flight) > 0, "no kill caught transitions unacknowledged"
        finally:
            client.close()
            learner.kill()
    assert _stored(store) == keys, "each transition stored exactly once across three SIGKILLs"


def test_hung_learner_is_noticed_in_time_and_appends_never_wait(tmp_path: Path) -> None:
    store, rng = tmp_path / "store.jsonl", np.random.default_rng(2)
    learner = LearnerProcess(0, store)
    with Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
        client = ActorClient(f"127.0.0.1:{learner.port}", "actor-0", spool, config=FAST)
        try:
            keys = fill(spool, 5, rng)
            wait_until(lambda: client.status().connected and spool.unacked_count == 0, 10, "a connected client")
            learner.signal(signal.SIGSTOP)  # alive to the kernel (TCP accepts), silent to the actor
            hung, took = time.monotonic(), list[float]()
            while client.status().connected:
                keys += fill(spool, 1, rng, start_episode=len(took) + 5, took=took)
                assert time.monotonic() - hung < FAST.dead_after_s + 1.0, "the hung learner was not noticed in time"
                time.sleep(0.01)
            noticed = time.monotonic() - hung
            keys += fill(spool, 20, rng, start_episode=len(took) + 5, took=took)  # still appending, learner hung
            assert FAST.dead_after_s - 0.1 <= noticed < FAST.dead_after_s + 1.0
            assert max(took) < 0.5, f"an append took {max(took):.3f} s while the learner hung"
            assert spool.unacked_count > 0
            learner.signal(signal.SIGCONT)
            wait_until(lambda: spool.unacked_count == 0, 15, "catching up once the learner answers again")
        finally:
            client.close()
            learner.kill()
    assert _stored(store) == keys
