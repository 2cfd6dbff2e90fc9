"""The gRPC contract between actor and learner: one bidirectional stream of raw wire messages, shared by both sides.

There is no protobuf: the service is registered with grpc's generic handlers and every gRPC message is the bytes of
one :mod:`rslkit.link.wire` frame, untouched (``request_deserializer=None``), so the only format on the wire is the
one :func:`rslkit.link.wire.decode` validates::

    /rslkit.realworld.Learner/Stream   actor -> learner: heartbeat, transitions (or permit_request, rollout)
                                        learner -> actor: ack, weights (and permit)

Call metadata: ``rslkit-actor-id`` (the actor's id, the sender of every message it sends) and, when the learner has a
token, ``authorization: Bearer <token>``. The token is a secret, so the command lines read it from a file
(the learner's ``--token_file``, an actor's ``--actor.token_file``) or from the ``RSLKIT_TOKEN`` environment variable
(never from a flag a process list shows). An actor's connection settings are one :class:`ActorLinkCfg`
(``--actor.learner``, ``--actor.id``, ``--actor.tls_ca`` ...), the same for the simulated actors and the ROS 2
node's actor mode. Only grpc and the standard library are imported (the robot side has no torch).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

SERVICE = "rslkit.realworld.Learner"
METHOD = "Stream"
FULL_METHOD = f"/{SERVICE}/{METHOD}"
ACTOR_ID_KEY = "rslkit-actor-id"
AUTH_KEY = "authorization"
REASON_KEY = "rslkit-reason"
"""Trailing metadata key of a stream the learner ended on purpose; the value ``replaced`` stops the old actor."""
SERVER_TLS = "Pass --tls_cert CERT.pem --tls_key KEY.pem (and a token), use 127.0.0.1, or pass --allow_insecure_remote"
CLIENT_TLS = "Pass --actor.tls_ca CA.pem, use 127.0.0.1, or pass --actor.allow_insecure_remote"
"""The ways out of a refusal to serve or connect without TLS, named in it."""
DEFAULT_ADDRESS = "127.0.0.1:50051"
"""The learner's default address (serve and connect)."""
REPLACED = "replaced"
LEARNER_ID = "learner"
"""The sender id of the learner's messages (ack, weights)."""
GRPC_SLACK_BYTES = 1 << 20
"""gRPC's own receive limit is the wire limit plus this: a message a little over the wire limit reaches the decoder
(refused with its clear WireError text, logged and counted); one far over it is refused by gRPC unread."""


@dataclass(frozen=True)
class ServerTLS:
    """The learner's TLS key pair (PEM bytes); with ``client_ca`` set, actors must present a certificate it signed."""

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    @classmethod
    def from_files(cls, cert: str | Path, key: str | Path, client_ca: str | Path | None = None) -> ServerTLS:
        """Read PEM files: the certificate (chain), its private key and optionally the CA of client certificates."""
        return cls(Path(cert).read_bytes(), Path(key).read_bytes(), Path(client_ca).read_bytes() if client_ca else None)

    def credentials(self) -> grpc.ServerCredentials:
        """``grpc.ssl_server_credentials`` for this key pair."""
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=bool(self.client_ca),
        )


@dataclass(frozen=True)
class ClientTLS:
    """What the actor trusts (PEM bytes of the CA, or of the learner's self-signed certificate) and optionally its own
    key pair; ``server_name`` overrides the host name checked against the certificate (e.g. when dialing an IP)."""

    root_certificates: bytes
    server_name: str | None = None
    cert_chain: bytes | None = None
    private_key: bytes | None = None

    @classmethod
    def from_files(cls, ca: str | Path, server_name: str | None = None) -> ClientTLS:
        """Trust the PEM certificate(s) in ``ca``."""
        return cls(Path(ca).read_bytes(), server_name)

    def credentials(self) -> grpc.ChannelCredentials:
        """``grpc.ssl_channel_credentials`` for these certificates."""
        return grpc.ssl_channel_credentials(self.root_certificates, self.private_key, self.cert_chain)

    def options(self) -> list[tuple[str, str]]:
        """Channel options: the host-name override, if any."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def split_address(address: str) -> tuple[str, int]:
    """``("127.0.0.1", 50051)`` from ``"127.0.0.1:50051"`` (``"[::1]:50051"`` for IPv6); ValueError otherwise."""
    if "://" in address:
        raise ValueError(f"the address must be HOST:PORT without a scheme (e.g. 10.0.0.2:50051), got {address!r}.")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"address must be HOST:PORT (e.g. 127.0.0.1:50051, [::1]:50051), got {address!r}.")
    return host.removeprefix("[").removesuffix("]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_tls_off_loopback(address: str, secure: bool, allow_insecure_remote: bool, what: str, fix: str) -> None:
    """Refuse a plain-text ``address`` that is not loopback unless ``allow_insecure_remote``.

    Args:
        address: ``host:port`` to serve or connect to.
        secure: whether TLS is configured.
        what: the refused action, ``serve`` or ``connect to``.
        fix: the ways out (:data:`SERVER_TLS`, :data:`CLIENT_TLS`).

    Raises:
        ValueError: an address that is not HOST:PORT, or one off loopback without TLS, naming the three ways out.
    """
    host, _ = split_address(address)
    if not secure and not is_loopback(host) and not allow_insecure_remote:
        raise ValueError(
            f"refusing to {what} {address} without TLS: actors' data and the token would cross the network in clear. "
            f"{fix} on a network you trust."
        )


@dataclass
class ActorLinkCfg:
    """How an actor reaches its learner: ``--actor.<field>`` on every actor's command line (``python -m
    rslkit.realworld actor``, the ROS 2 node's actor mode)."""

    learner: str = DEFAULT_ADDRESS
    """The learner's ``HOST:PORT`` (a host other than loopback needs ``tls_ca``)."""
    id: str = "actor-0"
    """This actor's id (1-64 of ``[A-Za-z0-9_.-]``); one per robot."""
    token_file: str = ""
    """A file holding the learner's token (or set ``RSLKIT_TOKEN``; empty and unset: the learner has none)."""
    tls_ca: str = ""
    """The CA certificate (PEM) the learner's certificate is checked against; empty: plain text (loopback only)."""
    tls_server_name: str = ""
    """The name the learner's certificate carries, when ``learner`` is an address it does not name."""
    allow_insecure_remote: bool = False
    """Dial a non-loopback learner in plain text (a network you trust end to end)."""

    def client_tls(self) -> ClientTLS | None:
        """The TLS to dial with (None: plain text), after refusing plain text off loopback.

        Raises:
            ValueError: a learner address that is not HOST:PORT, or one off loopback without TLS, naming the flags.
        """
        require_tls_off_loopback(self.learner, bool(self.tls_ca), self.allow_insecure_remote, "connect to", CLIENT_TLS)
        return ClientTLS.from_files(self.tls_ca, self.tls_server_name or None) if self.tls_ca else None

    def read_token(self) -> str | None:
        """The token from ``token_file`` or the secret ``RSLKIT_TOKEN`` (None: the learner has none)."""
        return read_token(self.token_file, "--actor.token_file")


TOKEN_ENV = "RSLKIT_TOKEN"
"""The environment variable that may hold the token: a secret, kept off the command line (the usual practice for
credentials), as an alternative to a token file."""


def read_token(path: str | Path | None, flag: str) -> str | None:
    """The token in the file ``path`` (surrounding whitespace stripped), or without a path the secret
    :data:`TOKEN_ENV` (None when unset: no token).

    Raises:
        ValueError: a missing or empty file, naming ``flag``.
    """
    if not path:
        return os.environ.get(TOKEN_ENV) or None
    try:
        text = Path(path).read_text().strip()
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot read it ({err.strerror}).") from None
    if not text:
        raise ValueError(f"{flag} {path} is empty.")
    return text


def bearer(token: str) -> str:
    """The ``authorization`` metadata value for ``token``."""
    if not token or not token.isprintable() or token != token.strip():
        raise ValueError("token must be a non-empty printable string without surrounding spaces.")
    return f"Bearer {token}"


def token_matches(metadata: Sequence[tuple[str, str | bytes]], token: str | None) -> bool:
    """Whether the call's ``authorization`` metadata carries ``token`` (always true when the learner has none)."""
    if token is None:
        return True
    given = next((v for k, v in metadata if k == AUTH_KEY), None)
    given = given.decode(errors="replace") if isinstance(given, bytes) else given
    return given is not None and hmac.compare_digest(given.encode(), bearer(token).encode())


def message_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """gRPC limits on one message in each direction, from the wire limit."""
    limit = max_message_bytes + GRPC_SLACK_BYTES
    return [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]


def keepalive_options(keepalive_s: float) -> list[tuple[str, int]]:
    """HTTP/2 pings every ``keepalive_s`` while a stream is open, so a vanished peer (cable, power) is noticed."""
    ms = max(int(keepalive_s * 1000), 1000)
    return [
        ("grpc.keepalive_time_ms", ms),
        ("grpc.keepalive_timeout_ms", ms),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.enable_retries", 0),  # the actor retries itself, from its spool
    ]


def server_keepalive_options(keepalive_s: float) -> list[tuple[str, int]]:
    """The learner pings too, and accepts the actors' pings at that rate (gRPC's default would answer GOAWAY)."""
    ms = max(int(keepalive_s * 1000), 1000)
    return [
        ("grpc.keepalive_time_ms", ms),
        ("grpc.keepalive_timeout_ms", ms),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", ms // 2),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.so_reuseport", 0),  # a second learner on a port in use fails to bind instead of sharing it
    ]


def actor_call_metadata(
    target: str, actor_id: str, token: str | None, tls: ClientTLS | None, allow_insecure_remote: bool
) -> tuple[tuple[str, str], ...]:
    """The metadata of an actor's stream to ``target``, after refusing plain text off loopback.

    Raises:
        ValueError: ``target`` is not loopback, ``tls`` is None and ``allow_insecure_remote`` is False.
    """
    require_tls_off_loopback(target, tls is not None, allow_insecure_remote, "connect to", CLIENT_TLS)
    auth = ((AUTH_KEY, bearer(token)),) if token else ()
    return ((ACTOR_ID_KEY, actor_id),) + auth


def actor_channel(target: str, tls: ClientTLS | None, max_message_bytes: int, keepalive_s: float) -> grpc.Channel:
    """A channel from an actor to the learner at ``target`` with the wire's size limits and keepalives."""
    options = message_options(max_message_bytes) + keepalive_options(keepalive_s)
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, tls.credentials(), options=options + tls.options())
