"""The wire format of the actor/learner link: a small typed JSON header plus named arrays as safetensors bytes.

One message, all integers little-endian::

    offset  bytes  field
    0       4      magic b"RSLW"
    4       2      format version (1)
    6       2      flags (0, reserved)
    8       4      header length H (at most MAX_HEADER_BYTES)
    12      8      payload length P
    20      4      CRC-32 (zlib) of bytes [0, 20) and [24, 24 + H + P)
    24      H      header: a UTF-8 JSON object {"kind": ..., "sender": ..., fields of the kind}
    24 + H  P      payload: the message's named arrays, safetensors bytes (``safetensors.numpy``)

:func:`decode` trusts nothing: the byte limit is checked first, then the frame (magic, version, lengths, checksum),
the header (kind, exact field set, types, ranges, the sender's schema against the receiver's), then every array
(exact names, shapes and dtypes from the schema, finite floats, booleans stored as 0/1, ordering rules). Any failure
is a :class:`WireError`. :func:`encode` applies the same checks, so a sender finds a bad message before it is
spooled or sent. Only numpy and safetensors are imported: the robot side runs this without torch.

Message kinds live in one registry (:data:`KINDS`): this module registers the kinds every protocol shares
(``ack``, ``weights``, ``heartbeat``); :mod:`rslkit.link.transitions` registers the off-policy loop's
``transitions`` and :mod:`rslkit.link.rollouts` the on-policy loop's ``rollout``, ``permit_request`` and ``permit``.
A receiver knows the kinds of the modules it imported.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import safetensors.numpy

MAGIC = b"RSLW"
FORMAT_VERSION = 1
PREFIX = struct.Struct("<4sHHIQI")
PREFIX_BYTES = PREFIX.size  # 24
MAX_HEADER_BYTES = 1 << 16
DEFAULT_MAX_BYTES = 64 << 20
"""Default limit on the size of one message; sender and receiver must agree on it."""
DTYPES = tuple("bool uint8 int8 uint16 int16 uint32 int32 uint64 int64 float16 float32 float64".split())
INT64_MAX = 2**63 - 1
MAX_NDIM = 8
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
"""Actor ids, sender ids and observation group names."""
WEIGHT_NAME = re.compile(r"[A-Za-z0-9_.:/\-]{1,256}")


class WireError(ValueError):
    """A message that is malformed, corrupted, too large or does not match the receiver's schema."""


def check_name(value: object, what: str) -> str:
    """``value`` if it is a valid id (1-64 of ``[A-Za-z0-9_.-]``, starting alphanumeric), else :class:`WireError`."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise WireError(f"{what} must be 1-64 characters of [A-Za-z0-9_.-] starting alphanumeric, got {value!r}.")
    return value


def check_int(value: object, what: str, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= INT64_MAX:
        raise WireError(f"{what} must be an integer in [{low}, 2**63 - 1], got {value!r}.")
    return value


# ---------------------------------------------------------------------------------------------------- schema
@dataclass(frozen=True)
class ArraySpec:
    """Shape (without the batch dimension) and numpy dtype name of one array, e.g. ``ArraySpec((3,), "float32")``."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        shape = tuple(self.shape) if isinstance(self.shape, (tuple, list)) else None
        if shape is None or len(shape) > MAX_NDIM or any(type(d) is not int or not 1 <= d < 2**31 for d in shape):
            raise WireError(f"shape must be a tuple of at most {MAX_NDIM} ints in [1, 2**31), got {self.shape!r}.")
        if self.dtype not in DTYPES:
            raise WireError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}.")
        object.__setattr__(self, "shape", shape)

    def to_json(self) -> dict[str, Any]:
        """``{"shape": [...], "dtype": "..."}``."""
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, obj: object, what: str) -> ArraySpec:
        """Parse :meth:`to_json`'s output; :class:`WireError` for anything else."""
        obj = check_fields(obj, {"shape", "dtype"}, what)
        if not isinstance(obj["shape"], list):
            raise WireError(f"{what}.shape must be a list of ints, got {obj['shape']!r}.")
        return cls(tuple(obj["shape"]), obj["dtype"])


# ---------------------------------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Ack:
    """From the learner: ``acked[actor_id]`` is the highest seq up to which all of that actor's data is stored."""

    sender: str
    acked: Mapping[str, int]
    kind: ClassVar[str] = "ack"


@dataclass(frozen=True, eq=False)
class Weights:
    """Policy weights of ``version`` as named arrays (a state dict, or an exported ONNX file as a uint8 array)."""

    sender: str
    version: int
    arrays: Mapping[str, np.ndarray]
    kind: ClassVar[str] = "weights"


@dataclass(frozen=True)
class Heartbeat:
    """I am alive: the sender's wall clock, the policy version it runs and its next sequence number."""

    sender: str
    time_ns: int
    policy_version: int
    next_seq: int
    kind: ClassVar[str] = "heartbeat"


Message = Any
"""A message of any registered kind (a frozen dataclass with ``kind`` and ``sender``)."""


@dataclass(frozen=True)
class Kind:
    """One registered message kind.

    Attributes:
        name: the header's ``kind``.
        cls: the message class (its ``kind`` class attribute is ``name``).
        fields: the header's fields besides ``kind`` and ``sender``.
        encode: ``message -> (header fields, arrays)``, validated (:class:`WireError` otherwise).
        decode: ``(header, payload, schema) -> message``: validates the header's fields and the payload against the
            receiver's ``schema`` (None when the receiver has none).
    """

    name: str
    cls: type
    fields: frozenset[str]
    encode: Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]
    decode: Callable[[dict[str, Any], memoryview, Any], Any]


KINDS: dict[str, Kind] = {}
"""Every message kind a receiver in this process can decode, by name."""


def register(kind: Kind) -> None:
    """Add ``kind`` to :data:`KINDS` (once per kind name; registering the same class again is a no-op)."""
    known = KINDS.get(kind.name)
    if known is not None and known.cls is not kind.cls:
        raise ValueError(f"message kind {kind.name!r} is registered already (by {known.cls.__qualname__}).")
    KINDS[kind.name] = kind


# ---------------------------------------------------------------------------------------------------- arrays
def _exact(keys: Any, expected: set[str], what: str, noun: str) -> None:
    missing, extra = sorted(expected - set(keys)), sorted(set(keys) - expected)
    if missing or extra:
        parts = [f"missing {noun} {missing}"] * bool(missing) + [f"unexpected {noun} {extra}"] * bool(extra)
        raise WireError(f"{what}: {', '.join(parts)}.")


def check_fields(obj: object, expected: set[str], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise WireError(f"{what} must be a JSON object, got {type(obj).__name__}.")
    _exact(obj.keys(), expected, what, "fields")
    return obj


def check_array_names(arrays: Mapping[str, Any], expected: set[str], what: str) -> None:
    _exact(arrays.keys(), expected, what, "arrays")


def _check_values(name: str, array: np.ndarray) -> None:
    """Finite floats and 0/1 booleans (any other byte would be a bool numpy cannot round-trip)."""
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = int(array.size - np.isfinite(array).sum())
        raise WireError(f"array {name!r} holds {bad} non-finite values (NaN/inf): fix the env or policy making them.")
    if array.dtype == np.bool_ and array.size and array.view(np.uint8).max() > 1:
        raise WireError(f"array {name!r} is bool but holds bytes other than 0 and 1.")


def check_array(name: str, array: object, shape: tuple[int, ...], dtype: str) -> None:
    if not isinstance(array, np.ndarray):
        raise WireError(f"array {name!r} must be a numpy array, got {type(array).__name__}.")
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        fix = "check the schema" if array.dtype == np.dtype(dtype) else f"cast with .astype(np.{dtype})"
        got = f"{array.dtype} {list(array.shape)}"
        raise WireError(f"array {name!r}: expected {dtype} {list(shape)}, got {got}: {fix}.")
    _check_values(name, array)


def _check_weights(arrays: Mapping[str, Any]) -> None:
    if not arrays:
        raise WireError("a weights message needs at least one array.")
    for name, array in arrays.items():
        if not isinstance(name, str) or not WEIGHT_NAME.fullmatch(name):
            raise WireError(f"weight name must be 1-256 characters of [A-Za-z0-9_.:/-], got {name!r}.")
        if not isinstance(array, np.ndarray) or array.dtype.name not in DTYPES or array.ndim > MAX_NDIM:
            raise WireError(f"weight {name!r} must be a numpy array of one of {DTYPES}, at most {MAX_NDIM}-d.")
        _check_values(name, array)


# ---------------------------------------------------------------------------------------------------- encode
def encode(message: Message, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """``message`` as bytes, after the checks :func:`decode` makes (:class:`WireError` if one fails).

    Args:
        message: a message of a registered kind (:data:`KINDS`).
        max_bytes: the receiver's limit on one message.
    """
    kind = KINDS.get(getattr(message, "kind", None))  # type: ignore[arg-type]
    if kind is None or not isinstance(message, kind.cls):
        raise WireError(f"cannot encode {type(message).__name__}: expected a message of a kind of {sorted(KINDS)}.")
    header: dict[str, Any] = {"kind": kind.name, "sender": check_name(getattr(message, "sender", None), "sender")}
    fields, arrays = kind.encode(message)
    return frame(header | fields, arrays, max_bytes)


def frame(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """One frame of an already validated ``header`` (a JSON object of integers, strings, lists and objects) and its
    named ``arrays``; the encoders of every message kind end here."""
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    payload = safetensors.numpy.save({k: np.ascontiguousarray(a) for k, a in arrays.items()})
    if len(text) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(text)} bytes exceeds {MAX_HEADER_BYTES}: fewer acked actors or obs groups.")
    head = PREFIX.pack(MAGIC, FORMAT_VERSION, 0, len(text), len(payload), 0)[:20]
    crc = zlib.crc32(payload, zlib.crc32(text, zlib.crc32(head)))
    data = head + struct.pack("<I", crc) + text + payload
    if len(data) > max_bytes:
        raise WireError(f"message of {len(data)} bytes exceeds max_bytes={max_bytes}: send smaller batches.")
    return data


# ---------------------------------------------------------------------------------------------------- decode
def frame_size(prefix: bytes) -> int:
    """Total size of the frame that starts with ``prefix`` (its first :data:`PREFIX_BYTES` bytes), checked.

    For reading frames back to back from a file or stream; :class:`WireError` for a bad or short prefix.
    """
    if len(prefix) < PREFIX_BYTES:
        raise WireError(f"truncated: {len(prefix)} bytes, less than the {PREFIX_BYTES}-byte prefix of a message.")
    magic, version, flags, header_len, payload_len, _ = PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise WireError(f"not an rslkit wire message (magic {magic!r}, expected {MAGIC!r}).")
    if version != FORMAT_VERSION:
        raise WireError(f"wire format version {version} is not supported (this rslkit speaks {FORMAT_VERSION}).")
    if flags != 0:
        raise WireError(f"unknown flags {flags:#06x} (this rslkit knows none): upgrade the receiver.")
    if header_len > MAX_HEADER_BYTES:
        raise WireError(f"header of {header_len} bytes is longer than the limit of {MAX_HEADER_BYTES}.")
    return PREFIX_BYTES + header_len + payload_len


def unframe(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[dict[str, Any], memoryview]:
    """The parsed JSON header (kind and field names checked) and the payload bytes of a checked frame."""
    try:
        view = memoryview(data).cast("B")
    except TypeError:  # not bytes-like, or a non-contiguous view
        raise WireError(f"expected contiguous bytes, got {type(data).__name__}.") from None
    if len(view) > max_bytes:
        raise WireError(f"message of {len(view)} bytes exceeds max_bytes={max_bytes}: refused unread.")
    size = frame_size(view[:PREFIX_BYTES].tobytes())
    if size != len(view):
        raise WireError(f"frame declares {size} bytes but {len(view)} arrived (truncated or with trailing bytes).")
    (crc,) = struct.unpack_from("<I", view, 20)
    if zlib.crc32(view[PREFIX_BYTES:], zlib.crc32(view[:20])) != crc:
        raise WireError("checksum mismatch: the message was corrupted in transit or on disk.")
    header_len = PREFIX.unpack_from(view)[3]
    header = _parse_header(view[PREFIX_BYTES : PREFIX_BYTES + header_len].tobytes())
    return header, view[PREFIX_BYTES + header_len :]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise WireError("header repeats a JSON key.")
    return out


def _no_float(text: str) -> Any:
    raise WireError(f"header holds the number {text[:40]!r}: every number in a header is an integer.")


def _parse_header(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_float=_no_float, parse_constant=_no_float
        )
    except WireError:
        raise
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise WireError(f"header is not UTF-8 JSON: {err}") from None
    if not isinstance(obj, dict):
        raise WireError(f"header must be a JSON object, got {type(obj).__name__}.")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise WireError(f"unknown message kind {kind!r}; known: {', '.join(sorted(KINDS))}.")
    check_fields(obj, {"kind", "sender"} | KINDS[kind].fields, f"{kind} header")
    check_name(obj["sender"], "sender")
    return obj


def load_arrays(payload: memoryview) -> dict[str, np.ndarray]:
    try:
        arrays = safetensors.numpy.load(payload.tobytes())
    except Exception as err:  # the parser's errors (SafetensorError, unknown dtypes) name no common base
        raise WireError(f"payload is not valid safetensors: {err}") from None
    return {name: np.array(a) for name, a in arrays.items()}  # writable copies of the read-only views


def read_header(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """The checked JSON header of a message, without parsing its arrays (to index stored messages).

    The frame, checksum, kind, field names and sender are validated; the fields' values and the payload are not:
    use :func:`decode` before trusting a message's content.
    """
    return unframe(data, max_bytes)[0]


def decode(data: bytes, schema: Any = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    """The message in ``data``, validated completely; :class:`WireError` for anything malformed.

    Args:
        data: one message as :func:`encode` made it.
        schema: the receiver's schema (a :class:`~rslkit.link.transitions.TransitionSchema` for transitions, a
            :class:`~rslkit.link.rollouts.RolloutSchema` for rollouts and permits; other kinds need none).
        max_bytes: larger messages are refused before they are parsed.
    """
    header, payload = unframe(data, max_bytes)
    return decode_frame(header, payload, schema)


def decode_frame(header: dict[str, Any], payload: memoryview, schema: Any = None) -> Message:
    """The message of an :func:`unframe`'d frame (for a receiver that picks the schema by the header's kind)."""
    return KINDS[header["kind"]].decode(header, payload, schema)


def no_arrays(payload: memoryview, kind: str) -> None:
    """Refuse a payload that holds arrays (kinds made of header fields only)."""
    check_array_names(load_arrays(payload), set(), kind)


def _encode_ack(message: Ack) -> tuple[dict[str, Any], dict[str, Any]]:
    acked = {check_name(a, "an acked actor id"): check_int(s, f"acked[{a!r}]") for a, s in message.acked.items()}
    return {"acked": acked}, {}


def _decode_ack(header: dict[str, Any], payload: memoryview, schema: Any) -> Ack:
    if not isinstance(header["acked"], dict):
        raise WireError(f"acked must be an object actor id -> seq, got {header['acked']!r}.")
    acked = {check_name(a, "an acked actor id"): check_int(s, f"acked[{a!r}]") for a, s in header["acked"].items()}
    no_arrays(payload, "ack")
    return Ack(header["sender"], acked)


def _encode_weights(message: Weights) -> tuple[dict[str, Any], dict[str, Any]]:
    _check_weights(message.arrays)
    return {"version": check_int(message.version, "version")}, dict(message.arrays)


def _decode_weights(header: dict[str, Any], payload: memoryview, schema: Any) -> Weights:
    version = check_int(header["version"], "version")
    arrays = load_arrays(payload)
    _check_weights(arrays)
    return Weights(header["sender"], version, arrays)


HEARTBEAT_FIELDS = ("time_ns", "policy_version", "next_seq")


def _encode_heartbeat(message: Heartbeat) -> tuple[dict[str, Any], dict[str, Any]]:
    return {f: check_int(getattr(message, f), f) for f in HEARTBEAT_FIELDS}, {}


def _decode_heartbeat(header: dict[str, Any], payload: memoryview, schema: Any) -> Heartbeat:
    message = Heartbeat(header["sender"], *(check_int(header[f], f) for f in HEARTBEAT_FIELDS))
    no_arrays(payload, "heartbeat")
    return message


register(Kind("ack", Ack, frozenset({"acked"}), _encode_ack, _decode_ack))
register(Kind("weights", Weights, frozenset({"version"}), _encode_weights, _decode_weights))
register(Kind("heartbeat", Heartbeat, frozenset(HEARTBEAT_FIELDS), _encode_heartbeat, _decode_heartbeat))
