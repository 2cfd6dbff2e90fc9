"""A faulty network between actor and learner (a loopback proxy that delays bytes, cuts connections and stalls,
standing in for `tc netem`, whose qdisc this kernel lacks): nothing is lost and nothing is stored twice."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fault_proxy import FaultProxy
from transport_helpers import FAST, fill, needs_netns, serve, wait_until

from rslkit.link.client import ActorClient
from rslkit.link.sink import MemorySink
from rslkit.link.spool import Spool
from tests.link.wire_samples import SCHEMA

pytestmark = [needs_netns, pytest.mark.timeout(90)]


def test_cut_and_delayed_connections_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    sink, rng = MemorySink(), np.random.default_rng(0)
    with serve(sink) as server:
        proxy = FaultProxy(server.address, delay_s=0.002, cut_after=(10_000, 60_000), seed=1)
        keys: Counter[tuple[str, int, int]] = Counter()
        with Spool(tmp_path / "s", "actor-0", SCHEMA, segment_bytes=4096) as spool:
            client = ActorClient(proxy.address, "actor-0", spool, config=FAST, seed=0)
            try:
                for episode in range(200):
                    keys += fill(spool, 1, rng, start_episode=episode)
                    time.sleep(0.005)
                wait_until(lambda: spool.unacked_count == 0, 20, "every transition acknowledged through the proxy")
            finally:
                client.close()
                proxy.close()
        assert proxy.cuts >= 3 and client.status().failures >= 3, "the proxy cut too few connections to test anything"
        stored = Counter(sink.seqs("actor-0"))
        assert sorted(stored) == list(range(sum(keys.values()))) and set(stored.values()) == {1}
        assert sink.count() == sum(keys.values())
        assert sink.duplicates > 0, "no resend crossed a cut: the test did not exercise the learner's dedupe"


def test_stalled_network_is_noticed_and_recovered_from(tmp_path: Path) -> None:
    sink, rng = MemorySink(), np.random.default_rng(1)
    with serve(sink) as server:
        proxy = FaultProxy(server.address)
        with Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
            client = ActorClient(proxy.address, "actor-0", spool, config=FAST)
            try:
                keys = fill(spool, 10, rng)
                wait_until(lambda: spool.unacked_count == 0 and client.status().connected, 10, "a connected client")
                proxy.freeze()  # bytes held both ways, sockets open: keepalive alone would take far longer
                stalled = time.monotonic()
                keys += fill(spool, 10, rng, start_episode=10)
                wait_until(lambda: not client.status().connected, FAST.dead_after_s + 1.0, "the stall to be noticed")
                assert time.monotonic() - stalled >= FAST.dead_after_s - 0.1
                proxy.freeze(False)
                wait_until(lambda: spool.unacked_count == 0, 10, "catching up after the stall")
            finally:
                client.close()
                proxy.close()
        assert sorted(sink.seqs("actor-0")) == list(range(sum(keys.values())))
