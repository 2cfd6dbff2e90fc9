"""The actor's end of the transport: a background thread that streams the spool to the learner, applies its acks and
keeps the newest weights it pushes, and reconnects (with backoff) whenever anything goes wrong.

The actor's control loop never touches the network: it appends to its :class:`rslkit.realworld.spool.Spool` (a
write and an fsync) and reads :meth:`ActorClient.latest_weights` (a reference under a lock); this thread does the rest.
A learner that is gone, hung or unreachable is noticed within ``dead_after_s``: the learner answers every
heartbeat, so a stream that hears nothing for that long is cancelled and reopened. Nothing is lost across reconnects:
each new stream resends everything the spool holds unacknowledged, and the learner drops what it already has.

Runs without torch: only numpy, grpc and rslkit.realworld's wire, spool and transport are imported.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np

from rslkit.realworld import transport, wire
from rslkit.realworld.spool import Spool

log = logging.getLogger(__name__)
TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
}
"""Stream ends that a reconnect is expected to cure (logged as warnings); any other end is logged as an error."""


@dataclass(frozen=True)
class Backoff:
    """Delay before reconnect attempt ``k`` (0, 1, ...): ``min(max_s, initial_s * multiplier**k)``, less a random
    fraction of up to ``jitter`` of it, so that many actors of a restarted learner do not reconnect in lockstep."""

    initial_s: float = 0.1
    max_s: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (0 < self.initial_s <= self.max_s and self.multiplier >= 1 and 0 <= self.jitter < 1):
            raise ValueError("Backoff needs 0 < initial_s <= max_s, multiplier >= 1 and 0 <= jitter < 1.")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before attempt ``attempt``."""
        base = min(self.max_s, self.initial_s * self.multiplier ** min(attempt, 64))
        return base * (1.0 - self.jitter * rng.random())


@dataclass(frozen=True)
class ClientConfig:
    """Timing and limits of an :class:`ActorClient`.

    Attributes:
        heartbeat_s: a heartbeat goes out this often; the learner answers each one.
        dead_after_s: a stream that hears nothing from the learner for this long is given up and reopened.
        stream_s: the deadline of one stream; it is then reopened (nothing is lost).
        poll_s: how often the spool is checked for new transitions (the latency a transition waits at most).
        window_bytes: unacknowledged bytes in flight at most (at least one message is always sent).
        keepalive_s: HTTP/2 ping interval, which notices a dead connection below the stream.
        close_s: :meth:`ActorClient.close` waits this long for the thread at most.
        max_message_bytes: the learner's limit on one message (weights it pushes included).
        backoff: reconnect delays.
    """

    heartbeat_s: float = 0.5
    dead_after_s: float = 3.0
    stream_s: float = 600.0
    poll_s: float = 0.02
    window_bytes: int = 4 << 20
    keepalive_s: float = 10.0
    close_s: float = 2.0
    max_message_bytes: int = wire.DEFAULT_MAX_BYTES
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if not 0 < self.poll_s <= self.heartbeat_s < self.dead_after_s:
            raise ValueError(
                "ClientConfig needs 0 < poll_s <= heartbeat_s < dead_after_s (the learner answers heartbeats)."
            )
        if self.stream_s <= self.dead_after_s or self.window_bytes < 1 or self.close_s <= self.poll_s:
            raise ValueError("ClientConfig needs stream_s > dead_after_s, window_bytes >= 1 and close_s > poll_s.")


@dataclass(frozen=True)
class ClientStatus:
    """A snapshot of an :class:`ActorClient`.

    Attributes:
        running: the network thread is alive.
        connected: a stream is open and the learner answered on it within ``dead_after_s``.
        streams: streams opened so far; failures: streams that ended with an error (reconnects followed).
        last_error: why the last stream ended, e.g. ``"UNAVAILABLE: ..."`` (None before any failure).
        acked, unacked: the spool's watermark and how many transitions wait for the learner.
        weights_version: the newest weights received (None: none yet).
        replaced: a newer stream of this actor id took over at the learner; this client stopped.
    """

    running: bool
    connected: bool
    streams: int
    failures: int
    last_error: str | None
    acked: int
    unacked: int
    weights_version: int | None
    replaced: bool


class _Stream:
    """One stream's state, shared by the request generator (gRPC's thread), the response reader and the supervisor."""

    def __init__(self, client: ActorClient) -> None:
        self.client = client
        self.ended = threading.Event()
        self.sent_last = client.spool.acked  # the last seq sent on this stream
        self.in_flight: deque[tuple[int, int]] = deque()  # (last seq, bytes) of messages sent, maybe unacknowledged
        self.last_heard = time.monotonic()
        self.heard = False
        self.error: str | None = None
        self.transient = True

    def requests(self) -> Iterator[bytes]:
        """Heartbeats and the spool's unacknowledged messages, in seq order, until the stream ends."""
        client, config = self.client, self.client.config
        try:
            yield client.heartbeat()
            last_beat = time.monotonic()
            while not self.ended.is_set() and not client.stopping:
                sent = False
                if client.spool.next_seq - 1 > self.sent_last and self._window_open():
                    for _, last, data in client.spool.pending(max_bytes=config.window_bytes):
                        if last > self.sent_last and not self.ended.is_set():
                            yield data
                            self.sent_last, sent = last, True
                            self.in_flight.append((last, len(data)))
                if time.monotonic() - last_beat >= config.heartbeat_s:
                    yield client.heartbeat()
                    last_beat = time.monotonic()
                elif not sent:
                    self.ended.wait(config.poll_s)
        except ValueError as err:  # the spool was closed under the client, or is damaged
            self.fail(f"reading the spool failed: {err}", transient=False)

    def _window_open(self) -> bool:
        """Whether fewer than ``window_bytes`` sent on this stream wait for their ack (so the spool is read again only
        when something can be sent: it re-reads the unacknowledged messages before the new ones)."""
        acked = self.client.spool.acked
        while self.in_flight and self.in_flight[0][0] <= acked:
            self.in_flight.popleft()
        return sum(n for _, n in self.in_flight) < self.client.config.window_bytes

    def read(self, call: Iterator[bytes]) -> None:
        """Apply every message of the learner until the stream ends; record why it ended."""
        try:
            for data in call:
                self.client.receive(data)
                self.last_heard, self.heard = time.monotonic(), True
            self.fail("the learner ended the stream")
        except grpc.RpcError as err:
            self.client.note_rpc_error(err, self)
        except ValueError as err:  # WireError from the learner's bytes, or an ack the spool refuses
            self.fail(f"the learner sent a message this actor refuses: {err}", transient=False)
        finally:
            self.ended.set()

    def fail(self, reason: str, transient: bool = True) -> None:
        """End the stream for ``reason`` (the first reason given wins); ``transient``: a reconnect may cure it."""
        if self.error is None:
            self.error, self.transient = reason, transient
        self.ended.set()

    def silent_s(self) -> float:
        """Seconds since the learner last said anything on this stream (or since it opened)."""
        return time.monotonic() - self.last_heard


class ActorClient:
    """Streams ``spool`` to the learner at ``target`` from a background thread, from construction until :meth:`close`.

    Args:
        target: the learner's ``HOST:PORT``; a host other than loopback needs ``tls``.
        actor_id: this actor's id; must be the spool's.
        spool: the actor's spool; the actor appends to it, this client sends and acknowledges.
        token: the learner's token, if it has one.
        tls: what the actor trusts; without it traffic is plain text (loopback only, unless allowed).
        config: timing and limits.
        allow_insecure_remote: connect to a non-loopback host without TLS.
        seed: of the backoff jitter.
    """

    def __init__(
        self,
        target: str,
        actor_id: str,
        spool: Spool,
        *,
        token: str | None = None,
        tls: transport.ClientTLS | None = None,
        config: ClientConfig | None = None,
        allow_insecure_remote: bool = False,
        seed: int | None = None,
    ) -> None:
        self._metadata = transport.actor_call_metadata(target, actor_id, token, tls, allow_insecure_remote)
        if wire.check_name(actor_id, "actor_id") != spool.actor_id:
            raise ValueError(f"actor_id {actor_id!r} is not the spool's actor id {spool.actor_id!r}.")
        self.target, self.actor_id, self.spool, self.tls = target, actor_id, spool, tls
        self.config = config or ClientConfig()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._weights: tuple[int, dict[str, np.ndarray]] | None = None
        self._push_latency_s: deque[float] = deque(maxlen=10_000)
        self._policy_version = 0
        self._connected = self._replaced = False
        self._streams = self._failures = 0
        self._last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"rslkit-actor-{actor_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ for the actor loop (never on the network)
    def latest_weights(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, arrays)`` of the newest weights received, or None; swap them in at an episode boundary."""
        with self._lock:
            return self._weights

    def push_latencies_s(self) -> list[float]:
        """Seconds from the learner's publish (its ``meta/published_ns`` wall clock) to the arrival here, per weights
        version received (the last 10,000). Meaningful where both clocks agree (one machine, or NTP/PTP)."""
        with self._lock:
            return list(self._push_latency_s)

    def set_policy_version(self, version: int) -> None:
        """The weights version the actor runs now, reported in heartbeats (the learner logs staleness from it)."""
        if type(version) is not int or version < 0:
            raise ValueError(f"version must be an int >= 0, got {version!r}.")
        self._policy_version = version

    def status(self) -> ClientStatus:
        """Where the client stands (a snapshot)."""
        with self._lock:
            version = self._weights[0] if self._weights else None
            return ClientStatus(
                self._thread.is_alive(), self._connected, self._streams, self._failures, self._last_error,
                self.spool.acked, self.spool.unacked_count, version, self._replaced,
            )  # fmt: skip

    @property
    def stopping(self) -> bool:
        """:meth:`close` was called, or a newer stream of this actor id took over."""
        return self._stop.is_set()

    def close(self) -> None:
        """Stop the network thread (within ``config.close_s``); the spool stays open, its pending data kept."""
        self._stop.set()
        self._thread.join(self.config.close_s)
        if self._thread.is_alive():
            log.warning("actor %s: the network thread did not stop within %.1f s", self.actor_id, self.config.close_s)

    def __enter__(self) -> ActorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the network thread
    def heartbeat(self) -> bytes:
        """An encoded heartbeat: now, the policy version run, the spool's next seq."""
        beat = wire.Heartbeat(self.actor_id, time.time_ns(), self._policy_version, self.spool.next_seq)
        return wire.encode(beat, self.config.max_message_bytes)

    def receive(self, data: bytes) -> None:
        """Apply one message of the learner: an ack (to the spool) or weights (kept if newer)."""
        message = wire.decode(data, None, self.config.max_message_bytes)
        if message.sender != transport.LEARNER_ID:
            raise wire.WireError(f"a message from {message.sender!r}, expected {transport.LEARNER_ID!r}.")
        if isinstance(message, wire.Ack):
            if self.actor_id in message.acked:
                self.spool.ack(message.acked[self.actor_id])
        elif isinstance(message, wire.Weights):
            with self._lock:
                if self._weights is None or message.version > self._weights[0]:
                    self._weights = (message.version, dict(message.arrays))
                    published = message.arrays.get("meta/published_ns")
                    if published is not None and published.shape == (1,) and published.dtype == np.int64:
                        self._push_latency_s.append((time.time_ns() - int(published[0])) * 1e-9)
        else:
            raise wire.WireError(f"the learner sends acks and weights, not {message.kind}.")
        with self._lock:
            self._connected = True

    def note_rpc_error(self, err: grpc.RpcError, stream: _Stream) -> None:
        """Record why a stream failed; a replacement at the learner stops this client."""
        code = err.code() if isinstance(err, grpc.Call) else None
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        trailing = dict(err.trailing_metadata() or ()) if isinstance(err, grpc.Call) else {}
        if code == grpc.StatusCode.ABORTED and trailing.get(transport.REASON_KEY) == transport.REPLACED:
            log.error(
                "actor %s: a newer stream of this actor id took over at the learner; this client stops", self.actor_id
            )
            with self._lock:
                self._replaced = True
            self._stop.set()
        stream.fail(f"{code.name if code else 'ERROR'}: {details}", transient=code in TRANSIENT)

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            healthy = self._session()
            attempt = 0 if healthy else attempt + 1
            self._stop.wait(self.config.backoff.delay(attempt, self._rng))

    def _channel(self) -> grpc.Channel:
        return transport.actor_channel(self.target, self.tls, self.config.max_message_bytes, self.config.keepalive_s)

    def _session(self) -> bool:
        """One stream, from open to end; whether the learner answered on it."""
        stream, channel = _Stream(self), self._channel()
        with self._lock:
            self._streams += 1
        try:
            call = channel.stream_stream(transport.FULL_METHOD)(
                stream.requests(), metadata=self._metadata, timeout=self.config.stream_s
            )
            reader = threading.Thread(
                target=stream.read, args=(call,), name=f"rslkit-actor-read-{self.actor_id}", daemon=True
            )
            reader.start()
            self._supervise(stream)
            call.cancel()
            reader.join(self.config.close_s)
        finally:
            stream.ended.set()
            channel.close()
            self._ended(stream)
        return stream.heard

    def _supervise(self, stream: _Stream) -> None:
        """Wait for the stream to end; end it on close or when the learner has been silent for ``dead_after_s``."""
        while not stream.ended.wait(self.config.poll_s):
            if self._stop.is_set():
                stream.fail("the client was closed")
            elif stream.silent_s() > self.config.dead_after_s:
                stream.fail(f"no answer from the learner in {self.config.dead_after_s} s (gone, hung or unreachable)")

    def _ended(self, stream: _Stream) -> None:
        closed = self._stop.is_set() and not self._replaced
        with self._lock:
            self._connected = False
            if not closed:
                self._failures += 1
                self._last_error = stream.error
        if not closed:
            level = logging.WARNING if stream.transient else logging.ERROR
            log.log(level, "actor %s: stream to %s ended (%s); reconnecting", self.actor_id, self.target, stream.error)
