"""The actor's end of the link: one client for every protocol. A background thread keeps one gRPC stream to the
learner open (reconnecting with backoff whenever anything goes wrong), sends heartbeats, streams the spool (when the
actor has one) and the messages the actor sends, applies the learner's acks, keeps the newest weights it pushes and
hands other replies (the on-policy loop's permits) to :meth:`ActorClient.request`.

The actor's control loop never touches the network: it appends to its :class:`~rslkit.link.spool.Spool` (a write
and an fsync) and reads :meth:`ActorClient.latest_weights` (a reference under a lock); this thread does the rest.
A learner that is gone, hung or unreachable is noticed within ``dead_after_s``: the learner answers every
heartbeat, so a stream that hears nothing for that long is cancelled and reopened. Nothing spooled is lost across
reconnects: each new stream resends everything the spool holds unacknowledged, and the learner drops what it
already has. A reply (a permit) is valid only on the stream it came on: the learner revokes a stream's permits when
it ends, so the client forgets them too and asks again on the next stream.

Runs without torch: only numpy, grpc and rslkit.link are imported.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from rslkit.link import transport, wire
from rslkit.link.spool import Spool

log = logging.getLogger(__name__)
TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
}
"""Stream ends that a reconnect is expected to cure (logged as warnings); any other end is logged as an error, and an
INVALID_ARGUMENT (the learner refuses what this actor sends) stops the client (:attr:`ActorClient.fatal`)."""


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
        poll_s: how often the spool and the outbox are checked for news (the latency a message waits at most).
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
        fatal: why the client stopped for good (the learner refused this actor's messages, or sent one this actor
            refuses), or None.
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
    fatal: str | None


class _Stream:
    """One stream's state, shared by the request generator (gRPC's thread), the response reader and the supervisor."""

    def __init__(self, client: ActorClient, number: int) -> None:
        self.client, self.number = client, number
        self.ended = threading.Event()
        self.outbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        spool = client.spool
        self.sent_last = spool.acked if spool is not None else -1  # the last seq sent on this stream
        self.in_flight: deque[tuple[int, int]] = deque()  # (last seq, bytes) of messages sent, maybe unacknowledged
        self.last_heard = time.monotonic()
        self.heard = False
        self.error: str | None = None
        self.transient = True

    def requests(self) -> Iterator[bytes]:
        """Heartbeats, the spool's unacknowledged messages in seq order and the outbox, until the stream ends."""
        client, config = self.client, self.client.config
        try:
            yield client.heartbeat()
            last_beat = time.monotonic()
            while not self.ended.is_set() and not client.stopping:
                sent = False
                for data in self._spooled():
                    yield data
                    sent = True
                while not self.outbox.empty() and not self.ended.is_set():
                    yield self.outbox.get()
                    sent = True
                if time.monotonic() - last_beat >= config.heartbeat_s:
                    yield client.heartbeat()
                    last_beat = time.monotonic()
                elif not sent:
                    self.ended.wait(config.poll_s)
        except ValueError as err:  # the spool was closed under the client, or is damaged
            self.fail(f"reading the spool failed: {err}", transient=False)

    def _spooled(self) -> Iterator[bytes]:
        """The spool's messages not sent on this stream yet, while the window is open."""
        spool = self.client.spool
        if spool is None or spool.next_seq - 1 <= self.sent_last or not self._window_open():
            return
        for _, last, data in spool.pending(max_bytes=self.client.config.window_bytes):
            if last > self.sent_last and not self.ended.is_set():
                yield data
                self.sent_last = last
                self.in_flight.append((last, len(data)))

    def _window_open(self) -> bool:
        """Whether fewer than ``window_bytes`` sent on this stream wait for their ack (so the spool is read again only
        when something can be sent: it re-reads the unacknowledged messages before the new ones)."""
        assert self.client.spool is not None
        acked = self.client.spool.acked
        while self.in_flight and self.in_flight[0][0] <= acked:
            self.in_flight.popleft()
        return sum(n for _, n in self.in_flight) < self.client.config.window_bytes

    def read(self, call: Iterator[bytes]) -> None:
        """Apply every message of the learner until the stream ends; record why it ended."""
        try:
            for data in call:
                self.client.receive(data, self.number)
                self.last_heard, self.heard = time.monotonic(), True
            self.fail("the learner ended the stream")
        except grpc.RpcError as err:
            self.client.note_rpc_error(err, self)
        except wire.WireError as err:
            self.fail(f"the learner sent a message this actor refuses: {err}", transient=False)
            self.client.stop_for_good(f"the learner sent a message this actor refuses: {err}")
        except ValueError as err:  # an ack the spool refuses
            self.fail(f"the learner sent an ack this actor refuses: {err}", transient=False)
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
    """Talks to the learner at ``target`` from a background thread, from construction until :meth:`close`.

    Args:
        target: the learner's ``HOST:PORT``; a host other than loopback needs ``tls``.
        actor_id: this actor's id (the spool's, when there is one).
        spool: the actor's spool, streamed and acknowledged (None: the actor sends with :meth:`send` only).
        schema: this actor's schema of what the learner sends back (a permit's
            :class:`~rslkit.link.rollouts.RolloutSchema`; a learner that announces another is refused: :attr:`fatal`).
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
        spool: Spool | None = None,
        *,
        schema: Any = None,
        token: str | None = None,
        tls: transport.ClientTLS | None = None,
        config: ClientConfig | None = None,
        allow_insecure_remote: bool = False,
        seed: int | None = None,
    ) -> None:
        self._metadata = transport.actor_call_metadata(target, actor_id, token, tls, allow_insecure_remote)
        if spool is not None and wire.check_name(actor_id, "actor_id") != spool.actor_id:
            raise ValueError(f"actor_id {actor_id!r} is not the spool's actor id {spool.actor_id!r}.")
        self.target, self.actor_id, self.spool, self.schema, self.tls = target, actor_id, spool, schema, tls
        wire.check_name(actor_id, "actor_id")
        self.config = config or ClientConfig()
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._stream: _Stream | None = None
        self._streams = self._failures = 0
        self._weights: tuple[int, dict[str, np.ndarray]] | None = None
        self._push_latency_s: deque[float] = deque(maxlen=10_000)
        self._replies: dict[str, tuple[int, Any]] = {}  # kind -> (stream number, message)
        self._asked: dict[str, int] = {}  # kind of a pending request -> the stream it went out on
        self._heard = time.monotonic()
        self._policy_version = 0
        self._connected = self._replaced = False
        self.last_error: str | None = None
        """Why the last stream ended, e.g. ``"UNAVAILABLE: ..."`` (None before any failure)."""
        self.fatal: str | None = None
        """Why the client stopped for good (the learner refused this actor's messages, or sent one it refuses)."""
        self._thread = threading.Thread(target=self._run, name=f"rslkit-actor-{actor_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ for the actor loop (never on the network)
    def latest_weights(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, arrays)`` of the newest weights received, or None; swap them in at an episode boundary."""
        with self._cond:
            return self._weights

    def wait_weights(self, min_version: int, timeout_s: float) -> tuple[int, dict[str, np.ndarray]] | None:
        """The newest weights once their version is ``>= min_version``, waiting up to ``timeout_s``; else None."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._weights is None or self._weights[0] < min_version:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return None
                self._cond.wait(left)
            return self._weights

    def push_latencies_s(self) -> list[float]:
        """Seconds from the learner's publish (its ``meta/published_ns`` wall clock) to the arrival here, per weights
        version received (the last 10,000). Meaningful where both clocks agree (one machine, or NTP/PTP)."""
        with self._cond:
            return list(self._push_latency_s)

    def set_policy_version(self, version: int) -> None:
        """The weights version the actor runs now, reported in heartbeats (the learner logs staleness from it)."""
        if type(version) is not int or version < 0:
            raise ValueError(f"version must be an int >= 0, got {version!r}.")
        self._policy_version = version

    def send(self, message: Any, stream: int) -> bool:
        """Send ``message`` on stream ``stream`` (the one a permit came on); False, and dropped, if that stream has
        ended meanwhile (its permits were revoked)."""
        data = wire.encode(message, self.config.max_message_bytes)
        with self._cond:
            current = self._stream
            if current is None or current.number != stream or current.ended.is_set():
                return False
            current.outbox.put(data)
            return True

    def request(self, message: Any, reply_kind: str, timeout_s: float) -> tuple[int, Any] | None:
        """Send ``message`` (once per stream, until answered) and wait up to ``timeout_s`` for the learner's reply of
        kind ``reply_kind`` on the stream that is open.

        Returns:
            ``(stream number, reply)``, or None when no reply came in time (the learner is busy or gone: look at
            :meth:`silent_s`) or the client stopped. A reply that comes late, to an earlier call, still counts.
        """
        data = wire.encode(message, self.config.max_message_bytes)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._stop.is_set():
                stream = self._stream
                number = stream.number if stream is not None and not stream.ended.is_set() else 0
                reply = self._replies.get(reply_kind)
                if reply is not None and number and reply[0] == number:
                    del self._replies[reply_kind]
                    self._asked.pop(reply_kind, None)
                    return reply
                if stream is not None and number and self._asked.get(reply_kind) != number:
                    self._asked[reply_kind] = number
                    stream.outbox.put(data)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, self.config.poll_s * 5))
        return None

    def silent_s(self) -> float:
        """Seconds since the learner last said anything (on any stream)."""
        return time.monotonic() - self._heard

    def status(self) -> ClientStatus:
        """Where the client stands (a snapshot)."""
        spool = self.spool
        acked, unacked = (spool.acked, spool.unacked_count) if spool is not None else (-1, 0)
        with self._cond:
            version = self._weights[0] if self._weights else None
            return ClientStatus(
                self._thread.is_alive(), self._connected, self._streams, self._failures, self.last_error,
                acked, unacked, version, self._replaced, self.fatal,
            )  # fmt: skip

    @property
    def stopping(self) -> bool:
        """:meth:`close` or :meth:`interrupt` was called, a newer stream of this actor id took over, or the client
        stopped for good (:attr:`fatal`)."""
        return self._stop.is_set()

    def interrupt(self) -> None:
        """End every wait now and stop the network thread soon (safe in a signal handler: nothing is joined)."""
        self._stop.set()

    def close(self) -> None:
        """Stop the network thread (within ``config.close_s``); a spool stays open, its pending data kept."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(self.config.close_s)
        if self._thread.is_alive():
            log.warning("actor %s: the network thread did not stop within %.1f s", self.actor_id, self.config.close_s)

    def __enter__(self) -> ActorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the network thread
    def heartbeat(self) -> bytes:
        """An encoded heartbeat: now, the policy version run, the spool's next seq (0 without a spool)."""
        next_seq = self.spool.next_seq if self.spool is not None else 0
        beat = wire.Heartbeat(self.actor_id, time.time_ns(), self._policy_version, next_seq)
        return wire.encode(beat, self.config.max_message_bytes)

    def receive(self, data: bytes, stream: int = 0) -> None:
        """Apply one message of the learner (that came on stream ``stream``): an ack (to the spool), weights (kept if
        newer), or a reply for :meth:`request`."""
        message = wire.decode(data, self.schema, self.config.max_message_bytes)
        if message.sender != transport.LEARNER_ID:
            raise wire.WireError(f"a message from {message.sender!r}, expected {transport.LEARNER_ID!r}.")
        if isinstance(message, wire.Ack):
            if self.spool is not None and self.actor_id in message.acked:
                self.spool.ack(message.acked[self.actor_id])
        elif isinstance(message, wire.Heartbeat):
            raise wire.WireError("the learner sends acks, weights and replies, not heartbeats.")
        with self._cond:
            self._heard, self._connected = time.monotonic(), True
            if isinstance(message, wire.Weights):
                if self._weights is None or message.version > self._weights[0]:
                    self._weights = (message.version, dict(message.arrays))
                    published = message.arrays.get("meta/published_ns")
                    if published is not None and published.shape == (1,) and published.dtype == np.int64:
                        self._push_latency_s.append((time.time_ns() - int(published[0])) * 1e-9)
            elif not isinstance(message, wire.Ack):
                self._replies[message.kind] = (stream, message)
            self._cond.notify_all()

    def note_rpc_error(self, err: grpc.RpcError, stream: _Stream) -> None:
        """Record why a stream failed; a replacement at the learner, or a refusal of this actor's messages, stops
        this client."""
        code = err.code() if isinstance(err, grpc.Call) else None
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        trailing = dict(err.trailing_metadata() or ()) if isinstance(err, grpc.Call) else {}
        if code == grpc.StatusCode.ABORTED and trailing.get(transport.REASON_KEY) == transport.REPLACED:
            log.error(
                "actor %s: a newer stream of this actor id took over at the learner; this client stops", self.actor_id
            )
            with self._cond:
                self._replaced = True
        stream.fail(f"{code.name if code else 'ERROR'}: {details}", transient=code in TRANSIENT)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            self.stop_for_good(f"the learner refused this actor's message: {details}")
        elif self._replaced:
            self._stop.set()

    def stop_for_good(self, reason: str) -> None:
        """Stop the client: nothing a reconnect does would cure ``reason`` (:attr:`fatal`)."""
        log.error("actor %s: %s; the client stops", self.actor_id, reason)
        with self._cond:
            self.fatal = self.fatal or reason
            self._cond.notify_all()
        self._stop.set()

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
        channel = self._channel()
        with self._cond:
            self._streams += 1
            stream = self._stream = _Stream(self, self._streams)
            self._replies.clear()  # replies of an earlier stream were revoked with it
            self._cond.notify_all()
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
        closed = self._stop.is_set() and not self._replaced and self.fatal is None
        with self._cond:
            self._connected = False
            self._cond.notify_all()
            if not closed:
                self._failures += 1
                self.last_error = stream.error
        if not closed and self.fatal is None:
            level = logging.ERROR if not stream.transient else logging.WARNING if stream.heard else logging.INFO
            log.log(level, "actor %s: stream to %s ended (%s); reconnecting", self.actor_id, self.target, stream.error)
