"""The learner's end of the link: a gRPC server with one handler per message kind, acks, heartbeats and the newest
policy weights.

One bidirectional stream per actor (:mod:`rslkit.link.transport`). Each received message is validated by
:func:`rslkit.link.wire.decode` against the schema of the handler of its kind, then checked against the stream
(sender = the actor id of the stream) and handed to that handler (:class:`Handler`: the off-policy loop's
``transitions``, :class:`~rslkit.link.sink.TransitionsHandler`; the on-policy loop's ``permit_request`` and
``rollout``, the on-policy learner). Heartbeats are answered by the server itself with an ack. A message that fails
is refused: logged, counted, and that stream ends with INVALID_ARGUMENT (FAILED_PRECONDITION when its handler
refuses it) and the reason, while every other stream goes on. A new stream of an actor that is still connected
replaces the old one, which ends with ABORTED (trailing metadata ``rslkit-reason: replaced``). A stream that sends
nothing (not even a heartbeat) for ``idle_timeout_s`` ends with DEADLINE_EXCEEDED. Only numpy, grpc and safetensors
are imported.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import grpc
import numpy as np

from rslkit.link import transport, wire

TICK_S = 0.05
"""How often an idle stream's writer looks for news (stop, replacement, idle timeout) besides being woken."""
log = logging.getLogger(__name__)


class Refused(Exception):
    """A handler refuses a message: the stream ends with INVALID_ARGUMENT (``precondition``: FAILED_PRECONDITION,
    the message is well-formed but does not fit the learner's state) and ``text``."""

    def __init__(self, text: str, precondition: bool = False) -> None:
        super().__init__(text)
        self.code = grpc.StatusCode.FAILED_PRECONDITION if precondition else grpc.StatusCode.INVALID_ARGUMENT
        self.text = text


class Handler(Protocol):
    """Handles the messages of ``kinds`` on every stream. Called from the streams' reader threads (several at once).

    Attributes:
        kinds: the message kinds it takes (registered in :data:`rslkit.link.wire.KINDS`).
        schema: the schema those messages are decoded against.
    """

    kinds: tuple[str, ...]
    schema: Any

    def handle(self, stream: Stream, message: Any) -> None:
        """Act on a message of ``stream``'s actor; raise :class:`Refused` to refuse it as malformed, ValueError as
        not fitting the learner's state (FAILED_PRECONDITION)."""

    def stream_ended(self, stream: Stream) -> None:
        """``stream`` ended (replaced, refused, gone or the learner stopping)."""


@dataclass(frozen=True)
class ActorInfo:
    """What the learner knows of one actor: its latest stream's peer, acknowledged seq and last heartbeat."""

    actor_id: str
    connected: bool
    peer: str
    acked: int
    policy_version: int
    next_seq: int
    seconds_since_heard: float


@dataclass(eq=False)
class Stream:
    """One actor's stream: state shared by its reader thread, its writer (the gRPC handler) and the handlers.

    Attributes:
        actor_id: the actor's id (the sender of every message on it); number: the stream's number (from 1).
        last_seq: the last transitions seq received on this stream (kept by the transitions handler).
    """

    actor_id: str
    peer: str
    number: int = 0
    outbox: deque[bytes] = field(default_factory=deque)
    last_seen: float = field(default_factory=time.monotonic)
    last_seq: int = -1  # the last seq received on this stream
    acked: int = -1
    ack_due: bool = False
    weights_sent: int = -1
    policy_version: int = 0
    next_seq: int = 0
    replaced: bool = False
    error: tuple[grpc.StatusCode, str] | None = None
    requests_ended: bool = False
    finished: bool = False  # the handler returned: the reader stops
    wake: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: Counter[str] = field(default_factory=Counter)

    def acknowledge(self, acked: int, transitions: int) -> None:
        """Send the actor's watermark ``acked`` next (``transitions`` were received in the message it answers)."""
        with self.lock:
            self.acked, self.ack_due = max(self.acked, acked), True
            self.counts["transitions"] += transitions

    def send(self, data: bytes) -> None:
        """Queue ``data`` (an encoded message) for this stream, after any weights news."""
        with self.lock:
            self.outbox.append(data)
        self.wake.set()


@dataclass(frozen=True)
class _Published:
    version: int
    data: bytes


class LearnerServer:
    """Serves actors on ``bind`` from construction until :meth:`stop` (also a context manager).

    Args:
        handlers: one per message kind an actor may send besides heartbeats (a kind of two handlers: ValueError).
        bind: ``HOST:PORT`` (port 0: any free port, see :attr:`port`). A host other than loopback needs ``tls``.
        token: when set, actors must send it (``authorization: Bearer <token>``); others get UNAUTHENTICATED.
        tls: the learner's key pair; without it traffic is plain text (fine on loopback only).
        max_message_bytes: the limit on one message (the actors' spools must use the same).
        allow_insecure_remote: serve a non-loopback address without TLS (a network you trust end to end).
        idle_timeout_s: a stream silent this long (actors heartbeat far more often) is ended.
        keepalive_s: HTTP/2 ping interval, so a vanished actor's stream is noticed and freed.
        max_streams: concurrent streams; more are refused by gRPC (RESOURCE_EXHAUSTED).
    """

    def __init__(
        self,
        handlers: Sequence[Handler],
        bind: str = transport.DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        tls: transport.ServerTLS | None = None,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
        allow_insecure_remote: bool = False,
        idle_timeout_s: float = 10.0,
        keepalive_s: float = 10.0,
        max_streams: int = 32,
    ) -> None:
        transport.require_tls_off_loopback(bind, tls is not None, allow_insecure_remote, "serve", transport.SERVER_TLS)
        if token is not None:
            transport.bearer(token)  # validates it
        if idle_timeout_s <= 0 or max_streams < 1 or max_message_bytes < wire.PREFIX_BYTES:
            raise ValueError("idle_timeout_s must be > 0, max_streams >= 1, max_message_bytes >= 24.")
        self.handlers: dict[str, Handler] = {}
        for handler in handlers:
            for kind in handler.kinds:
                if kind in self.handlers or kind not in wire.KINDS or kind in ("heartbeat", "ack", "weights"):
                    raise ValueError(f"message kind {kind!r} is handled twice, unknown, or the server's own.")
                self.handlers[kind] = handler
        if not self.handlers:
            raise ValueError("LearnerServer needs at least one handler (TransitionsHandler, an on-policy learner).")
        self.token, self.max_message_bytes, self.idle_timeout_s = token, max_message_bytes, idle_timeout_s
        self._lock = threading.Lock()  # sessions, actors, weights, counts
        self._sessions: dict[str, Stream] = {}
        self._actors: dict[str, Stream] = {}  # the latest session of every actor ever connected
        self._weights: _Published | None = None
        self._counts: Counter[str] = Counter()
        self._stopping = False
        options = transport.message_options(max_message_bytes) + transport.server_keepalive_options(keepalive_s)
        pool = futures.ThreadPoolExecutor(max_workers=max_streams + 2, thread_name_prefix="rslkit-learner")
        self._server = grpc.server(pool, options=options, maximum_concurrent_rpcs=max_streams)
        method = grpc.stream_stream_rpc_method_handler(self._stream)  # raw bytes both ways
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(transport.SERVICE, {transport.METHOD: method}),)
        )
        self.port = self._bind(bind, tls)
        self.address = f"{bind.rpartition(':')[0]}:{self.port}"
        self._server.start()
        log.info(
            "learner serving on %s (%s, %s)",
            self.address,
            "TLS" if tls else "plain text",
            "token" if token else "no token",
        )

    def _bind(self, bind: str, tls: transport.ServerTLS | None) -> int:
        try:
            port = (
                self._server.add_secure_port(bind, tls.credentials()) if tls else self._server.add_insecure_port(bind)
            )
        except RuntimeError:
            port = 0
        if not port:
            self._server.stop(0)
            raise ValueError(
                f"could not bind {bind}: the port is in use (another learner?) or the address is not this machine's."
            )
        return port

    # ------------------------------------------------------------------ public
    def publish_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Make ``arrays`` (a state dict, or an ONNX file as uint8) the weights each actor gets next; versions increase.

        Each stream sends only the newest version it has not sent: nothing queues however fast versions come.
        """
        data = wire.encode(wire.Weights(transport.LEARNER_ID, version, arrays), self.max_message_bytes)
        with self._lock:
            if self._weights is not None and version <= self._weights.version:
                raise ValueError(f"weights version {version} is not above the published {self._weights.version}.")
            self._weights = _Published(version, data)
            sessions = list(self._sessions.values())
        for session in sessions:
            session.wake.set()

    def send(self, actor_id: str, data: bytes, stream: int | None = None) -> bool:
        """Queue ``data`` (an encoded message) for the current stream of ``actor_id``, after any weights news;
        False when that actor has no open stream (or, with ``stream``, when its open stream has another number)."""
        with self._lock:
            session = self._sessions.get(actor_id)
        if session is None or (stream is not None and session.number != stream):
            return False
        session.send(data)
        return True

    def counts(self) -> dict[str, int]:
        """Counters: streams, replaced, messages, transitions, heartbeats, every kind handled, refused,
        refused_<STATUS>, idle_closed."""
        with self._lock:
            counts = Counter(self._counts)
            for session in self._actors.values():
                with session.lock:
                    counts.update(session.counts)
            return dict(counts)

    def actors(self) -> dict[str, ActorInfo]:
        """Every actor seen since start, by id."""
        now = time.monotonic()
        with self._lock:
            return {
                a: ActorInfo(
                    a, self._sessions.get(a) is s, s.peer, s.acked, s.policy_version, s.next_seq, now - s.last_seen
                )
                for a, s in self._actors.items()
            }

    def stop(self, grace_s: float = 1.0) -> None:
        """End every stream (UNAVAILABLE: the actors reconnect later) and stop serving within about ``grace_s``."""
        with self._lock:
            self._stopping = True
            sessions = list(self._sessions.values())
        for session in sessions:
            session.wake.set()
        self._server.stop(grace_s).wait(grace_s + 2.0)

    def __enter__(self) -> LearnerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(0)

    # ------------------------------------------------------------------ one stream
    def _count(self, *names: str) -> None:
        with self._lock:
            self._counts.update(names)

    def _abort(self, context: grpc.ServicerContext, code: grpc.StatusCode, text: str) -> NoReturn:
        context.abort(code, text)
        raise AssertionError("grpc's abort returned")  # pragma: no cover - abort always raises

    def _stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        session = self._admit(context)
        reader = threading.Thread(
            target=self._read, args=(session, requests), daemon=True, name=f"rslkit-read-{session.actor_id}"
        )
        reader.start()
        try:
            yield from self._write(session, context)
        finally:
            with self._lock:
                if self._sessions.get(session.actor_id) is session:
                    del self._sessions[session.actor_id]
            session.finished = True
            reader.join(timeout=1.0)
            for handler in dict.fromkeys(self.handlers.values()):
                handler.stream_ended(session)

    def _admit(self, context: grpc.ServicerContext) -> Stream:
        """Check token and actor id; register the stream, replacing an older one of the same actor."""
        metadata, peer = context.invocation_metadata(), context.peer()
        if not transport.token_matches(metadata, self.token):
            self._count("refused", "refused_UNAUTHENTICATED")
            log.warning("refused a stream from %s: wrong or missing token", peer)
            self._abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "wrong or missing token: give the actor the learner's token (--actor.token_file, or RSLKIT_TOKEN).",
            )
        actor_id = next((v for k, v in metadata if k == transport.ACTOR_ID_KEY), None)
        try:
            wire.check_name(actor_id, f"metadata {transport.ACTOR_ID_KEY!r}")
        except wire.WireError as err:
            self._count("refused", "refused_INVALID_ARGUMENT")
            log.warning("refused a stream from %s: %s", peer, err)
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(err))
        assert isinstance(actor_id, str)
        with self._lock:
            session = Stream(actor_id, peer, number=self._counts["streams"] + 1)
            old, previous = self._sessions.get(actor_id), self._actors.get(actor_id)
            self._sessions[actor_id] = self._actors[actor_id] = session
            session.acked = previous.acked if previous is not None else -1  # answered to its first heartbeat
            self._counts.update(["streams"] + ["replaced"] * (old is not None))
        if old is not None:
            log.warning(
                "actor %s connected again from %s: its older stream from %s is closed", actor_id, peer, old.peer
            )
            old.replaced = True
            old.wake.set()
        log.info("actor %s connected from %s", actor_id, peer)
        return session

    def _read(self, session: Stream, requests: Iterator[bytes]) -> None:
        """The stream's reader thread: validate and store each message until the stream or the session ends."""
        try:
            for data in requests:
                if session.finished or session.replaced or session.error:
                    return
                self._handle(session, data)
                session.wake.set()
            session.requests_ended = True
        except Refused as refusal:
            self._count("refused", f"refused_{refusal.code.name}")
            log.warning("refused a message from actor %s (%s): %s", session.actor_id, session.peer, refusal.text)
            session.error = (refusal.code, refusal.text)
        except grpc.RpcError:  # the stream ended under the reader: cancelled, or an over-limit message gRPC refused
            session.requests_ended = True
        except Exception as err:  # a sink bug: end this stream, keep serving
            log.exception("storing a message of actor %s failed", session.actor_id)
            session.error = (grpc.StatusCode.INTERNAL, f"the learner failed to store the message: {err}")
        finally:
            session.wake.set()

    def _handle(self, session: Stream, data: bytes) -> None:
        try:
            header, payload = wire.unframe(data, self.max_message_bytes)
            kind = header["kind"]
            handler = self.handlers.get(kind)
            if handler is None and kind != "heartbeat":
                takes = ", ".join(["heartbeat", *self.handlers])
                raise Refused(f"this learner takes {takes}, not {kind}.")
            message = wire.decode_frame(header, payload, handler.schema if handler is not None else None)
        except wire.WireError as err:
            raise Refused(str(err)) from None
        if message.sender != session.actor_id:
            raise Refused(f"message from sender {message.sender!r} on the stream of actor {session.actor_id!r}")
        session.last_seen = time.monotonic()
        if handler is None:  # a heartbeat: answered with the actor's watermark
            self._count("heartbeats")
            with session.lock:
                session.policy_version, session.next_seq, session.ack_due = (
                    message.policy_version,
                    message.next_seq,
                    True,
                )
            return
        try:
            handler.handle(session, message)
        except ValueError as err:  # well-formed, but it does not fit the handler's state
            raise Refused(str(err), precondition=True) from None
        self._count("messages", *[kind] * (kind != "transitions"))

    def _write(self, session: Stream, context: grpc.ServicerContext) -> Iterator[bytes]:
        """The handler's side of the stream: acks and weights out, until the stream ends or must be ended."""
        while context.is_active():
            session.wake.wait(TICK_S)
            session.wake.clear()
            self._check_end(session, context)
            yield from self._news(session)
            if session.requests_ended:  # the actor closed its side: the last ack is out, the stream ends OK
                return

    def _check_end(self, session: Stream, context: grpc.ServicerContext) -> None:
        if session.replaced:
            context.set_trailing_metadata(((transport.REASON_KEY, transport.REPLACED),))
            self._abort(
                context,
                grpc.StatusCode.ABORTED,
                f"actor {session.actor_id} connected again: this older stream is closed.",
            )
        if session.error is not None:
            self._abort(context, *session.error)
        if self._stopping:
            self._abort(context, grpc.StatusCode.UNAVAILABLE, "the learner is shutting down; reconnect later.")
        if time.monotonic() - session.last_seen > self.idle_timeout_s:
            self._count("idle_closed")
            log.warning("actor %s sent nothing in %.1f s: its stream is closed", session.actor_id, self.idle_timeout_s)
            self._abort(
                context,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no message (not even a heartbeat) in {self.idle_timeout_s} s.",
            )

    def _news(self, session: Stream) -> Iterator[bytes]:
        """The ack (when due) and the newest weights the stream has not sent."""
        with session.lock:
            due, acked, session.ack_due = session.ack_due, session.acked, False
        if due:
            yield wire.encode(wire.Ack(transport.LEARNER_ID, {session.actor_id: acked} if acked >= 0 else {}))
        weights = self._weights
        if weights is not None and weights.version > session.weights_sent:
            session.weights_sent = weights.version
            yield weights.data
        while session.outbox:  # after the weights: a permit of version v follows the weights of version v
            with session.lock:
                data = session.outbox.popleft()
            yield data
