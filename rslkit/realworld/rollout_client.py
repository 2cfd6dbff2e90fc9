"""The on-policy actor's end of the transport: one gRPC stream (the same service, token, TLS, limits and keepalives as
:mod:`rslkit.realworld.transport_client`) that carries permit requests, rollouts and heartbeats out and weights and
permits in, reopened with backoff whenever it breaks.

A permit is valid only on the stream it came on: when a stream ends the learner revokes that stream's permits and
hands their rollout numbers to other actors, so this client forgets its permit too and asks again on the next
stream. Every wait is bounded (:meth:`RolloutClient.request_permit`, :meth:`RolloutClient.wait_weights`), and
:meth:`RolloutClient.silent_s` tells the actor how long the learner has said nothing at all (it answers every
heartbeat), so an actor whose learner is gone exits instead of waiting forever.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Iterator

import grpc
import numpy as np

from rslkit.realworld import transport, wire, wire_rollout
from rslkit.realworld.transport_client import ClientConfig
from rslkit.realworld.wire_rollout import Permit, PermitRequest, Rollout, RolloutSchema

log = logging.getLogger(__name__)


class RolloutClient:
    """Talks to the on-policy learner at ``target`` from a background thread, from construction until :meth:`close`.

    Args:
        target: the learner's ``HOST:PORT``; a host other than loopback needs ``tls``.
        actor_id: this actor's id (one per process).
        schema: this actor's rollout schema; a learner that announces another is refused (:attr:`fatal`).
        token, tls, allow_insecure_remote: as :class:`~rslkit.realworld.transport_client.ActorClient`.
        config: timing and limits (heartbeats, dead stream detection, backoff, message size).
        seed: of the backoff jitter.
    """

    def __init__(
        self,
        target: str,
        actor_id: str,
        schema: RolloutSchema,
        *,
        token: str | None = None,
        tls: transport.ClientTLS | None = None,
        config: ClientConfig | None = None,
        allow_insecure_remote: bool = False,
        seed: int | None = None,
    ) -> None:
        self._metadata = transport.actor_call_metadata(target, actor_id, token, tls, allow_insecure_remote)
        self.target, self.actor_id, self.schema, self.tls = target, wire.check_name(actor_id, "actor_id"), schema, tls
        self.config = config or ClientConfig()
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._stream = 0  # number of the open stream (0: none yet)
        self._outbox: queue.Queue[bytes] = queue.Queue()
        self._permit: tuple[int, Permit] | None = None
        self._asked_on = 0  # the stream a pending permit request went out on (0: none pending)
        self._weights: tuple[int, dict[str, np.ndarray]] | None = None
        self._heard = time.monotonic()
        self._version = 0
        self.last_error: str | None = None
        """Why the last stream ended, e.g. ``"FAILED_PRECONDITION: ..."`` (None before any failure)."""
        self.fatal: str | None = None
        """Why the client stopped for good (a learner of another schema, a message refused), or None."""
        self._thread = threading.Thread(target=self._run, name=f"rslkit-rollout-{actor_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ for the actor loop
    def request_permit(self, last_rollout: int, timeout_s: float) -> tuple[int, Permit] | None:
        """Ask for the next rollout and wait up to ``timeout_s`` for the learner's permit.

        Returns:
            ``(stream, permit)``, or None when no permit came in time (the learner is busy or gone: look at
            :meth:`silent_s`) or the client stopped. The request is sent again on every new stream.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._stop.is_set():
                if self._permit is not None and self._permit[0] == self._stream:
                    permit, self._permit, self._asked_on = self._permit, None, 0
                    return permit
                if self._stream > 0 and self._asked_on != self._stream:  # once per stream: a late permit still counts
                    self._asked_on = self._stream
                    self._outbox.put(wire_rollout.encode(PermitRequest(self.actor_id, last_rollout)))
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, self.config.poll_s * 5))
        return None

    def send_rollout(self, stream: int, rollout: Rollout) -> bool:
        """Send ``rollout`` (collected under a permit of stream ``stream``); False, and dropped, if that stream has
        ended meanwhile (its permit was revoked: the rollout number belongs to another actor now)."""
        data = wire_rollout.encode(rollout, self.config.max_message_bytes)
        with self._cond:
            if stream != self._stream:
                return False
            self._outbox.put(data)
            return True

    def latest_weights(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """``(version, arrays)`` of the newest weights received, or None."""
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

    def set_policy_version(self, version: int) -> None:
        """The weights version the actor runs, reported in heartbeats."""
        self._version = int(version)

    def silent_s(self) -> float:
        """Seconds since the learner last said anything (on any stream)."""
        return time.monotonic() - self._heard

    @property
    def stopped(self) -> bool:
        """:meth:`close` was called, or the client stopped for good (:attr:`fatal`)."""
        return self._stop.is_set()

    def interrupt(self) -> None:
        """End every wait now and stop the network thread soon (safe in a signal handler: nothing is joined)."""
        self._stop.set()

    def close(self) -> None:
        """Stop the network thread (within ``config.close_s``)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(self.config.close_s)

    def __enter__(self) -> RolloutClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the network thread
    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            heard = self._session()
            attempt = 0 if heard else attempt + 1
            self._stop.wait(self.config.backoff.delay(attempt, self._rng))

    def _channel(self) -> grpc.Channel:
        return transport.actor_channel(self.target, self.tls, self.config.max_message_bytes, self.config.keepalive_s)

    def _session(self) -> bool:
        """One stream from open to end; whether the learner answered on it."""
        ended, channel = threading.Event(), self._channel()
        with self._cond:
            self._stream += 1
            self._permit = None
            self._outbox = queue.Queue()
            stream = self._stream
            self._cond.notify_all()
        heard = [False]
        try:
            call = channel.stream_stream(transport.FULL_METHOD)(
                self._requests(ended), metadata=self._metadata, timeout=self.config.stream_s
            )
            reader = threading.Thread(target=self._read, args=(call, stream, ended, heard), daemon=True)
            reader.start()
            last_heard = time.monotonic()
            while not ended.wait(self.config.poll_s) and not self._stop.is_set():
                last_heard = max(last_heard, self._heard)
                if time.monotonic() - last_heard > self.config.dead_after_s:
                    log.warning(
                        "actor %s: no answer from the learner in %.1f s", self.actor_id, self.config.dead_after_s
                    )
                    break
            call.cancel()
            reader.join(self.config.close_s)
        finally:
            ended.set()
            channel.close()
        return heard[0]

    def _requests(self, ended: threading.Event) -> Iterator[bytes]:
        outbox, last_beat = self._outbox, 0.0
        while not ended.is_set() and not self._stop.is_set():
            if time.monotonic() - last_beat >= self.config.heartbeat_s:
                beat = wire.Heartbeat(self.actor_id, time.time_ns(), self._version, 0)
                yield wire.encode(beat, self.config.max_message_bytes)
                last_beat = time.monotonic()
            try:
                yield outbox.get(timeout=self.config.poll_s)
            except queue.Empty:
                pass

    def _read(self, call: Iterator[bytes], stream: int, ended: threading.Event, heard: list[bool]) -> None:
        try:
            for data in call:
                self._receive(data, stream)
                heard[0] = True
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            if code not in (grpc.StatusCode.CANCELLED, None) and not self._stop.is_set():
                self.last_error = f"{code.name}: {details}"
                level = logging.WARNING if heard[0] else logging.DEBUG  # a learner not (yet, or any more) up: quiet
                log.log(level, "actor %s: stream ended (%s: %s)", self.actor_id, code.name if code else "?", details)
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                self._fail(f"the learner refused this actor's message: {details}")
        except wire.WireError as err:
            self._fail(f"the learner sent a message this actor refuses: {err}")
        finally:
            ended.set()

    def _fail(self, reason: str) -> None:
        log.error("actor %s: %s", self.actor_id, reason)
        self.fatal = reason
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _receive(self, data: bytes, stream: int) -> None:
        message = wire_rollout.decode(data, self.schema, self.config.max_message_bytes)
        if message.sender != transport.LEARNER_ID:
            raise wire.WireError(f"a message from {message.sender!r}, expected {transport.LEARNER_ID!r}.")
        with self._cond:
            self._heard = time.monotonic()
            if isinstance(message, wire.Weights):
                if self._weights is None or message.version > self._weights[0]:
                    self._weights = (message.version, dict(message.arrays))
            elif isinstance(message, Permit):
                self._permit = (stream, message)
            elif not isinstance(message, wire.Ack):  # acks answer heartbeats: the learner is alive
                raise wire.WireError(f"the learner sends weights, permits and acks, not {message.kind}.")
            self._cond.notify_all()
