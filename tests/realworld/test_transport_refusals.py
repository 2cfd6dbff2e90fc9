"""The learner refuses bad input with the right gRPC status, logs and counts it, and keeps serving: malformed bytes,
NaN tensors, a wrong schema, oversized and non-monotonic messages, a wrong sender, a wrong or missing token."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import numpy as np
import pytest
import safetensors.numpy
from transport_helpers import FAST, fill, needs_netns, serve, wait_until

from rslkit.link import transport, wire
from rslkit.link.client import ActorClient
from rslkit.link.server import LearnerServer
from rslkit.link.sink import MemorySink
from rslkit.link.spool import Spool
from rslkit.link.transitions import Transitions, TransitionSchema
from tests.link.wire_samples import SCHEMA, frame, make_batch, mutate_bytes, split

pytestmark = [needs_netns, pytest.mark.timeout(60)]
TOKEN = "tok-123"
MAX_BYTES = 64 << 10
OTHER = TransitionSchema({"policy": wire.ArraySpec((4,), "float32")}, wire.ArraySpec((2,), "float32"))


def _transitions(first: int, n: int, schema: TransitionSchema = SCHEMA, sender: str = "actor-0") -> bytes:
    seq = np.arange(first, first + n, dtype=np.int64)
    batch = make_batch(n, np.random.default_rng(first), episode=first, schema=schema)
    return wire.encode(Transitions(sender, seq, batch, schema))


def _with_nan() -> bytes:
    header, payload = split(_transitions(0, 3))
    arrays = safetensors.numpy.load(payload)
    arrays["obs/policy"][1, 2] = np.nan
    return frame(header, arrays)  # a valid frame and checksum around a NaN observation


CASES: dict[str, tuple[list[bytes], dict[str, str], grpc.StatusCode, str]] = {
    "garbage": ([b"\x00not a wire message at all"], {}, grpc.StatusCode.INVALID_ARGUMENT, "not an rslkit wire message"),
    "truncated": ([_transitions(0, 3)[:-5]], {}, grpc.StatusCode.INVALID_ARGUMENT, "truncated"),
    "corrupted": ([_transitions(0, 3)[:-1] + b"\xff"], {}, grpc.StatusCode.INVALID_ARGUMENT, "checksum"),
    "nan": ([_with_nan()], {}, grpc.StatusCode.INVALID_ARGUMENT, "non-finite"),
    "wrong schema": ([_transitions(0, 3, OTHER)], {}, grpc.StatusCode.INVALID_ARGUMENT, "schema mismatch"),
    "oversized": ([b"RSLW" + bytes(MAX_BYTES)], {}, grpc.StatusCode.INVALID_ARGUMENT, "exceeds max_bytes"),
    "far oversized": (
        [bytes(MAX_BYTES + transport.GRPC_SLACK_BYTES + 1)],
        {},
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
    "non-monotonic": ([_transitions(5, 4), _transitions(3, 2)], {}, grpc.StatusCode.INVALID_ARGUMENT, "non-monotonic"),
    "resent on one stream": (
        [_transitions(0, 4), _transitions(0, 4)],
        {},
        grpc.StatusCode.INVALID_ARGUMENT,
        "non-monotonic",
    ),
    "wrong sender": ([_transitions(0, 3, sender="actor-9")], {}, grpc.StatusCode.INVALID_ARGUMENT, "sender 'actor-9'"),
    "weights from an actor": (
        [wire.encode(wire.Weights("actor-0", 1, {"w": np.zeros(2, np.float32)}))],
        {},
        grpc.StatusCode.INVALID_ARGUMENT,
        "not weights",
    ),
    "gap": (
        [_transitions(0, 2, sender="actor-gap"), _transitions(7, 2, sender="actor-gap")],
        {"actor": "actor-gap"},
        grpc.StatusCode.FAILED_PRECONDITION,
        "seqs 2..6 are missing",
    ),
    "no actor id": ([_transitions(0, 3)], {"actor": ""}, grpc.StatusCode.INVALID_ARGUMENT, "rslkit-actor-id"),
    "wrong token": ([_transitions(0, 3)], {"token": "guess"}, grpc.StatusCode.UNAUTHENTICATED, "token"),
    "no token": ([_transitions(0, 3)], {"token": ""}, grpc.StatusCode.UNAUTHENTICATED, "token"),
}


def _raw_stream(address: str, messages: Sequence[bytes], actor: str, token: str) -> tuple[int, grpc.RpcError]:
    """Send ``messages`` on one stream and read until it fails: (messages answered, the error)."""
    metadata = ([(transport.ACTOR_ID_KEY, actor)] if actor else []) + (
        [(transport.AUTH_KEY, f"Bearer {token}")] if token else []
    )
    options = transport.message_options(4 * MAX_BYTES + transport.GRPC_SLACK_BYTES)
    with grpc.insecure_channel(address, options=options) as channel:
        call = channel.stream_stream(transport.FULL_METHOD)(iter(messages), metadata=metadata, timeout=10)
        answered = 0
        try:
            for _ in call:
                answered += 1
        except grpc.RpcError as err:
            return answered, err
    raise AssertionError("the stream ended without an error")


@pytest.fixture(scope="module")
def server() -> Iterator[LearnerServer]:
    with serve(MemorySink(), token=TOKEN, max_message_bytes=MAX_BYTES) as server:
        yield server


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_with_its_status_and_logged(
    case: str, server: LearnerServer, caplog: pytest.LogCaptureFixture
) -> None:
    messages, meta, code, text = CASES[case]
    before = server.counts().get("refused", 0)
    with caplog.at_level(logging.WARNING, logger="rslkit.link.server"):
        _, err = _raw_stream(server.address, messages, meta.get("actor", "actor-0"), meta.get("token", TOKEN))
    assert err.code() == code, err.details()
    assert text in err.details()
    if code != grpc.StatusCode.RESOURCE_EXHAUSTED:  # gRPC refuses a message far over its limit unread
        assert server.counts()["refused"] == before + 1
        assert server.counts()[f"refused_{code.name}"] >= 1
        assert any("refused" in r.getMessage() for r in caplog.records)


def test_fuzzed_streams_are_refused_and_the_learner_survives(server: LearnerServer) -> None:
    """200 byte-level mutations of valid messages (wire_samples.mutate_bytes), one stream each."""
    r, seeds = random.Random(7), [_transitions(0, 3, sender="fuzz"), wire.encode(wire.Heartbeat("fuzz", 1, 0, 0))]
    codes: Counter[str] = Counter()
    metadata = [(transport.ACTOR_ID_KEY, "fuzz"), (transport.AUTH_KEY, f"Bearer {TOKEN}")]
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream(transport.FULL_METHOD)
        for _ in range(200):
            call = stream(iter([mutate_bytes(r.choice(seeds), r)]), metadata=metadata, timeout=10)
            try:
                list(call)
                codes["OK"] += 1
            except grpc.RpcError as err:
                codes[err.code().name] += 1
    assert set(codes) <= {"INVALID_ARGUMENT", "OK"} and codes["INVALID_ARGUMENT"] >= 190, codes


def test_learner_still_serves_good_actors_after_bad_ones(server: LearnerServer, tmp_path: Path) -> None:
    for messages, meta, _, _ in CASES.values():  # every bad stream once more, then a good actor
        _raw_stream(server.address, messages, meta.get("actor", "actor-0"), meta.get("token", TOKEN))
    with Spool(tmp_path / "s", "good-actor", SCHEMA, max_message_bytes=MAX_BYTES) as spool:
        keys = fill(spool, 20, np.random.default_rng(0))
        with ActorClient(server.address, "good-actor", spool, token=TOKEN, config=FAST) as client:
            wait_until(lambda: spool.unacked_count == 0, 10, "the good actor's acks")
            assert client.status().failures == 0
    assert server.actors()["good-actor"].acked == sum(keys.values()) - 1
