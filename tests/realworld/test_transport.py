"""The gRPC transport between actor and learner: round trips, weights, replacement, TLS, bounded close, and the
robot side without torch. Tests that open sockets run only inside a network namespace (`make test-realworld`)."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from transport_helpers import FAST, fill, needs_netns, serve, wait_until

from rslkit.link import transport, wire
from rslkit.link.client import ActorClient, Backoff, ClientConfig
from rslkit.link.server import LearnerServer
from rslkit.link.sink import MemorySink, TransitionsHandler
from rslkit.link.spool import Spool
from tests.link.wire_samples import SCHEMA

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------------------------------------------- no sockets
def test_robot_side_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "import rslkit.link.client, rslkit.link.server, rslkit.link.sink\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_backoff_grows_to_its_bound_with_jitter() -> None:
    backoff, rng = Backoff(initial_s=0.1, max_s=2.0, multiplier=2.0, jitter=0.5), random.Random(0)
    for attempt, base in enumerate([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]):
        delays = [backoff.delay(attempt, rng) for _ in range(50)]
        assert all(base * 0.5 <= d <= base for d in delays) and len(set(delays)) > 1
    assert backoff.delay(10**6, rng) <= 2.0
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(initial_s=0)
    with pytest.raises(ValueError, match="dead_after_s"):
        ClientConfig(heartbeat_s=3.0, dead_after_s=3.0)


def test_remote_bind_without_tls_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="without TLS"):
        LearnerServer([TransitionsHandler(SCHEMA, MemorySink())], "0.0.0.0:0")
    with pytest.raises(ValueError, match="without TLS"), Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
        ActorClient("10.1.2.3:50051", "actor-0", spool)
    with pytest.raises(ValueError, match="HOST:PORT"):
        LearnerServer([TransitionsHandler(SCHEMA, MemorySink())], "127.0.0.1")
    assert transport.is_loopback("::1") and transport.is_loopback("127.0.0.2") and not transport.is_loopback("10.0.0.1")


# ---------------------------------------------------------------------------------------------------- round trips
@needs_netns
def test_round_trip_of_two_actors_stores_each_transition_once(tmp_path: Path) -> None:
    sink = MemorySink()
    with serve(sink) as server:
        spools = [Spool(tmp_path / f"a{i}", f"actor-{i}", SCHEMA, segment_bytes=4096) for i in range(2)]
        keys = [fill(s, 30, np.random.default_rng(i)) for i, s in enumerate(spools)]  # spooled before connecting
        clients = [ActorClient(server.address, s.actor_id, s, config=FAST) for s in spools]
        for i, s in enumerate(spools):  # and while connected
            keys[i] += fill(s, 30, np.random.default_rng(10 + i), start_episode=30)
        done = lambda: all(s.unacked_count == 0 and s.disk_bytes == 0 for s in spools)  # noqa: E731
        wait_until(done, 10, "every transition acknowledged and its segment deleted")
        for i, s in enumerate(spools):
            stored = sorted(sink.seqs(s.actor_id))
            assert stored == list(range(s.next_seq)) == list(range(sum(keys[i].values())))
        assert sink.duplicates == 0
        assert server.counts()["transitions"] == sum(sum(k.values()) for k in keys)
        assert {a: i.acked for a, i in server.actors().items()} == {s.actor_id: s.next_seq - 1 for s in spools}
        for c in clients:
            assert c.status().connected and c.status().failures == 0
            c.close()
        for s in spools:
            s.close()


@needs_netns
def test_actor_gets_the_newest_weights_and_nothing_queues(tmp_path: Path) -> None:
    with serve(MemorySink()) as server, Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
        server.publish_weights(1, {"w": np.zeros(3, np.float32)})
        with pytest.raises(ValueError, match="not above"):
            server.publish_weights(1, {"w": np.zeros(3, np.float32)})
        with pytest.raises(wire.WireError, match="non-finite"):
            server.publish_weights(2, {"w": np.full(3, np.nan, np.float32)})
        with ActorClient(server.address, "actor-0", spool, config=FAST) as client:
            wait_until(lambda: client.latest_weights() is not None, 5, "the weights published before connecting")
            for version in range(2, 200):  # far faster than the stream sends: only the newest is kept per stream
                server.publish_weights(
                    version, {"w": np.full(3, version, np.float32), "onnx": np.arange(4, dtype=np.uint8)}
                )
            wait_until(lambda: client.status().weights_version == 199, 5, "the newest weights")
            version, arrays = client.latest_weights()  # type: ignore[misc]
            assert version == 199 and np.array_equal(arrays["w"], np.full(3, 199, np.float32))
            client.set_policy_version(199)
            wait_until(lambda: server.actors()["actor-0"].policy_version == 199, 5, "the heartbeat's policy version")


@needs_netns
def test_replacement_actor_takes_over_and_the_old_one_stops(tmp_path: Path) -> None:
    sink = MemorySink()
    with serve(sink) as server, Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
        # a half-open stream of actor-0 (its process died, the learner has not noticed yet): the newcomer wins at once
        channel = grpc.insecure_channel(server.address)
        beat, stale = wire.encode(wire.Heartbeat("actor-0", 1, 0, 0)), threading.Event()
        beats = iter(lambda: None if stale.wait(0.05) else beat, None)
        old = channel.stream_stream(transport.FULL_METHOD)(
            beats, metadata=((transport.ACTOR_ID_KEY, "actor-0"),), timeout=10
        )
        next(old)  # the learner answered: it is connected
        keys = fill(spool, 10, np.random.default_rng(0))
        first = ActorClient(server.address, "actor-0", spool, config=FAST)
        with pytest.raises(grpc.RpcError) as info:
            list(old)
        assert info.value.code() == grpc.StatusCode.ABORTED
        assert dict(info.value.trailing_metadata())[transport.REASON_KEY] == transport.REPLACED
        wait_until(lambda: spool.unacked_count == 0, 5, "the newcomer's transitions acknowledged")
        # the actor restarts its client (same spool): the older ActorClient stops instead of fighting back
        keys += fill(spool, 10, np.random.default_rng(1), start_episode=10)
        second = ActorClient(server.address, "actor-0", spool, config=FAST)
        wait_until(lambda: first.status().replaced and not first.status().running, 5, "the replaced client to stop")
        keys += fill(spool, 10, np.random.default_rng(2), start_episode=20)
        wait_until(lambda: spool.unacked_count == 0 and second.status().connected, 5, "the newest client's acks")
        assert sorted(sink.seqs("actor-0")) == list(range(sum(keys.values())))
        assert server.counts()["replaced"] == 2 and not second.status().replaced
        second.close()
        first.close()
        stale.set()
        channel.close()


@needs_netns
def test_a_silent_stream_is_closed_after_the_idle_timeout() -> None:
    with serve(MemorySink(), idle_timeout_s=0.3) as server, grpc.insecure_channel(server.address) as channel:
        quiet = threading.Event()

        def hello_then_silence() -> Iterator[bytes]:
            yield wire.encode(wire.Heartbeat("a", 1, 0, 0))
            quiet.wait(5)

        metadata = ((transport.ACTOR_ID_KEY, "a"),)
        call = channel.stream_stream(transport.FULL_METHOD)(hello_then_silence(), metadata=metadata)
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        quiet.set()
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "heartbeat" in info.value.details()
        assert 0.3 <= time.monotonic() - start < 2.0 and server.counts()["idle_closed"] == 1


@needs_netns
def test_streams_beyond_max_streams_are_refused() -> None:
    with serve(MemorySink(), max_streams=1) as server, grpc.insecure_channel(server.address) as channel:
        quiet, stream = threading.Event(), channel.stream_stream(transport.FULL_METHOD)

        def hello_then_silence(actor: str) -> Iterator[bytes]:
            yield wire.encode(wire.Heartbeat(actor, 1, 0, 0))
            quiet.wait(5)

        first = stream(hello_then_silence("a"), metadata=((transport.ACTOR_ID_KEY, "a"),), timeout=5)
        next(first)
        with pytest.raises(grpc.RpcError) as info:
            list(stream(hello_then_silence("b"), metadata=((transport.ACTOR_ID_KEY, "b"),), timeout=5))
        quiet.set()
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@needs_netns
def test_close_is_bounded_whatever_the_learner_does(tmp_path: Path) -> None:
    with serve(MemorySink()) as server:
        port = server.port
    with Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
        client = ActorClient(f"127.0.0.1:{port}", "actor-0", spool, config=FAST)  # nobody listens
        time.sleep(0.3)
        start = time.monotonic()
        client.close()
        assert time.monotonic() - start < FAST.close_s and not client.status().running
        assert client.status().failures >= 1 and "UNAVAILABLE" in (client.status().last_error or "")


# ---------------------------------------------------------------------------------------------------- TLS and token
def _self_signed(directory: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip(
            "neither the openssl CLI nor the cryptography package is on this machine to make a test certificate"
        )
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=rslkit-learner", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@needs_netns
def test_tls_with_a_token_round_trips_and_plain_text_is_refused(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    sink = MemorySink()
    with serve(sink, tls=transport.ServerTLS.from_files(cert, key), token="s3cret") as server:
        with Spool(tmp_path / "s", "actor-0", SCHEMA) as spool:
            keys = fill(spool, 10, np.random.default_rng(0))
            with ActorClient(
                server.address, "actor-0", spool, token="s3cret", tls=transport.ClientTLS.from_files(cert), config=FAST
            ):
                wait_until(lambda: spool.unacked_count == 0, 10, "acks over TLS")
            assert sink.count() == sum(keys.values())
            with ActorClient(server.address, "actor-0", spool, token="s3cret", config=FAST) as plain:  # no TLS
                wait_until(lambda: plain.status().failures >= 1, 5, "the plain-text client to fail")
                assert not plain.status().connected
