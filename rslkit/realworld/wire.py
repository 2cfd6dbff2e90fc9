"""The wire format of the actor/learner loop: a small typed JSON header plus named arrays as safetensors bytes.

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
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Mapping
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
TRANSITION_META = {"seq": "int64", "episode": "int64", "step": "int64", "policy_version": "int64"}
TRANSITION_FLAGS = ("done", "truncated", "intervention")


class WireError(ValueError):
    """A message that is malformed, corrupted, too large or does not match the receiver's schema."""


def check_name(value: object, what: str) -> str:
    """``value`` if it is a valid id (1-64 of ``[A-Za-z0-9_.-]``, starting alphanumeric), else :class:`WireError`."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise WireError(f"{what} must be 1-64 characters of [A-Za-z0-9_.-] starting alphanumeric, got {value!r}.")
    return value


def _int(value: object, what: str, low: int = 0) -> int:
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
        obj = _fields(obj, {"shape", "dtype"}, what)
        if not isinstance(obj["shape"], list):
            raise WireError(f"{what}.shape must be a list of ints, got {obj['shape']!r}.")
        return cls(tuple(obj["shape"]), obj["dtype"])


@dataclass(frozen=True)
class TransitionSchema:
    """What the transitions of one task look like: observation groups and action, shapes without the batch dim.

    Build it once from the env's spaces (:meth:`from_spaces`) on both sides. Rewards are float32; ``done``,
    ``truncated`` and ``intervention`` are bool; ``seq``, ``episode``, ``step`` and ``policy_version`` are int64.
    """

    obs: Mapping[str, ArraySpec]
    action: ArraySpec

    def __post_init__(self) -> None:
        if not isinstance(self.obs, Mapping) or not self.obs:
            raise WireError(f"obs must be a non-empty mapping group -> ArraySpec, got {self.obs!r}.")
        for group, spec in self.obs.items():
            check_name(group, "an observation group name")
            if not isinstance(spec, ArraySpec):
                raise WireError(f"obs[{group!r}] must be an ArraySpec, got {spec!r}.")
        if not isinstance(self.action, ArraySpec):
            raise WireError(f"action must be an ArraySpec, got {self.action!r}.")
        object.__setattr__(self, "obs", dict(sorted(self.obs.items())))

    @classmethod
    def from_spaces(cls, observation_space: Any, action_space: Any, group: str = "policy") -> TransitionSchema:
        """From gymnasium-like spaces (duck-typed: ``.shape``/``.dtype``; a ``Dict`` space's ``.spaces`` are groups).

        Args:
            observation_space: a ``Dict`` of groups, or one space (then named ``group``).
            action_space: a ``Box`` (or ``Discrete``: shape ``()``, int64).
        """
        spaces = getattr(observation_space, "spaces", None)
        groups = dict(spaces) if isinstance(spaces, Mapping) else {group: observation_space}
        obs = {g: _spec_of(s, f"observation group {g!r}") for g, s in groups.items()}
        return cls(obs, _spec_of(action_space, "action"))

    def to_json(self) -> dict[str, Any]:
        """``{"obs": {group: spec}, "action": spec}``."""
        return {"obs": {g: s.to_json() for g, s in self.obs.items()}, "action": self.action.to_json()}

    @classmethod
    def from_json(cls, obj: object) -> TransitionSchema:
        """Parse :meth:`to_json`'s output; :class:`WireError` for anything else."""
        obj = _fields(obj, {"obs", "action"}, "schema")
        if not isinstance(obj["obs"], dict):
            raise WireError(f"schema.obs must be an object of groups, got {obj['obs']!r}.")
        groups = obj["obs"].items()
        obs = {check_name(g, "an observation group name"): ArraySpec.from_json(s, f"schema.obs.{g}") for g, s in groups}
        return cls(obs, ArraySpec.from_json(obj["action"], "schema.action"))


def _spec_of(space: Any, what: str) -> ArraySpec:
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        raise WireError(f"the {what} space has no shape/dtype (not a Box?): build the TransitionSchema by hand.")
    return ArraySpec(tuple(int(d) for d in shape), np.dtype(dtype).name)


# ---------------------------------------------------------------------------------------------------- messages
@dataclass(frozen=True, eq=False)
class TransitionBatch:
    """N consecutive transitions of one actor.

    Attributes:
        obs: ``{group: [N, *schema.obs[group].shape]}``; next_obs: the same, after the step.
        action: ``[N, *schema.action.shape]``; reward: ``[N]`` float32.
        done: ``[N]`` bool, the episode ended at this step (termination or truncation, as VecEnv's ``dones``).
        truncated: ``[N]`` bool, it ended by a time limit (implies ``done``).
        episode, step: ``[N]`` int64, the key of each transition with the actor id: (actor_id, episode, step).
        policy_version: ``[N]`` int64, the weights version that chose the action.
        intervention: ``[N]`` bool, a human (or scripted expert) chose the action.
    """

    obs: Mapping[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    truncated: np.ndarray
    next_obs: Mapping[str, np.ndarray]
    episode: np.ndarray
    step: np.ndarray
    policy_version: np.ndarray
    intervention: np.ndarray

    def __len__(self) -> int:
        if np.ndim(self.reward) != 1 or len(self.reward) < 1:
            raise WireError(f"reward must be [N] with N >= 1, got shape {np.shape(self.reward)}.")
        return len(self.reward)


@dataclass(frozen=True, eq=False)
class Transitions:
    """A batch of transitions from actor ``sender``; ``seq: [N]`` int64, per-actor sequence numbers, increasing."""

    sender: str
    seq: np.ndarray
    batch: TransitionBatch
    schema: TransitionSchema
    kind: ClassVar[str] = "transitions"


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


Message = Transitions | Ack | Weights | Heartbeat
HEADER_FIELDS = {
    "transitions": {"kind", "sender", "first_seq", "last_seq", "schema"},
    "ack": {"kind", "sender", "acked"},
    "weights": {"kind", "sender", "version"},
    "heartbeat": {"kind", "sender", "time_ns", "policy_version", "next_seq"},
    # the on-policy loop's kinds, defined and decoded by rslkit.realworld.wire_rollout
    "rollout": {"kind", "sender", "rollout", "policy_version", "schema"},
    "permit_request": {"kind", "sender", "last_rollout"},
    "permit": {"kind", "sender", "rollout", "policy_version", "schema"},
}
ROLLOUT_KINDS = ("rollout", "permit_request", "permit")


# ---------------------------------------------------------------------------------------------------- arrays
def _exact(keys: Any, expected: set[str], what: str, noun: str) -> None:
    missing, extra = sorted(expected - set(keys)), sorted(set(keys) - expected)
    if missing or extra:
        parts = [f"missing {noun} {missing}"] * bool(missing) + [f"unexpected {noun} {extra}"] * bool(extra)
        raise WireError(f"{what}: {', '.join(parts)}.")


def _fields(obj: object, expected: set[str], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise WireError(f"{what} must be a JSON object, got {type(obj).__name__}.")
    _exact(obj.keys(), expected, what, "fields")
    return obj


def _names(arrays: Mapping[str, Any], expected: set[str], what: str) -> None:
    _exact(arrays.keys(), expected, what, "arrays")


def _check_values(name: str, array: np.ndarray) -> None:
    """Finite floats and 0/1 booleans (any other byte would be a bool numpy cannot round-trip)."""
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = int(array.size - np.isfinite(array).sum())
        raise WireError(f"array {name!r} holds {bad} non-finite values (NaN/inf): fix the env or policy making them.")
    if array.dtype == np.bool_ and array.size and array.view(np.uint8).max() > 1:
        raise WireError(f"array {name!r} is bool but holds bytes other than 0 and 1.")


def _check_array(name: str, array: object, shape: tuple[int, ...], dtype: str) -> None:
    if not isinstance(array, np.ndarray):
        raise WireError(f"array {name!r} must be a numpy array, got {type(array).__name__}.")
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        fix = "check the schema" if array.dtype == np.dtype(dtype) else f"cast with .astype(np.{dtype})"
        got = f"{array.dtype} {list(array.shape)}"
        raise WireError(f"array {name!r}: expected {dtype} {list(shape)}, got {got}: {fix}.")
    _check_values(name, array)


def _transition_arrays(seq: object, batch: TransitionBatch) -> dict[str, Any]:
    if not isinstance(batch.obs, Mapping) or not isinstance(batch.next_obs, Mapping):
        raise WireError("obs and next_obs must be mappings group -> array [N, ...].")
    arrays: dict[str, Any] = {f"obs/{g}": a for g, a in batch.obs.items()}
    arrays |= {f"next_obs/{g}": a for g, a in batch.next_obs.items()}
    fields = ("action", "reward", "episode", "step", "policy_version") + TRANSITION_FLAGS
    return arrays | {"seq": seq} | {f: getattr(batch, f) for f in fields}


def _check_transitions(arrays: Mapping[str, Any], schema: TransitionSchema) -> None:
    """Names, shapes, dtypes and values of a transition batch's arrays, and its ordering rules."""
    expected = {f"{p}/{g}" for p in ("obs", "next_obs") for g in schema.obs} | set(TRANSITION_META)
    _names(arrays, expected | {"action", "reward"} | set(TRANSITION_FLAGS), "transitions")
    seq = arrays["seq"]
    if not isinstance(seq, np.ndarray) or seq.ndim != 1 or len(seq) < 1:
        raise WireError(f"array 'seq' must be [N] int64 with N >= 1, got {getattr(seq, 'shape', seq)!r}.")
    n = len(seq)
    for group, spec in schema.obs.items():
        for prefix in ("obs", "next_obs"):
            _check_array(f"{prefix}/{group}", arrays[f"{prefix}/{group}"], (n, *spec.shape), spec.dtype)
    _check_array("action", arrays["action"], (n, *schema.action.shape), schema.action.dtype)
    _check_array("reward", arrays["reward"], (n,), "float32")
    for name, dtype in TRANSITION_META.items():
        _check_array(name, arrays[name], (n,), dtype)
        if arrays[name].min() < 0:
            raise WireError(f"array {name!r} holds negative values; it counts from 0.")
    for name in TRANSITION_FLAGS:
        _check_array(name, arrays[name], (n,), "bool")
    _check_order(arrays)


def _check_order(arrays: Mapping[str, np.ndarray]) -> None:
    if (np.diff(arrays["seq"]) <= 0).any():
        raise WireError("sequence numbers must strictly increase within a batch.")
    if (arrays["truncated"] & ~arrays["done"]).any():
        raise WireError("a truncated transition must also be done (done = terminated or truncated).")
    # sort-based, not np.unique(axis=0): that imports numpy.ma on first use, a ~30 ms stall under the GIL that a
    # robot's control thread would feel on its first spool append
    order = np.lexsort((arrays["step"], arrays["episode"]))
    episode, step = arrays["episode"][order], arrays["step"][order]
    if ((np.diff(episode) == 0) & (np.diff(step) == 0)).any():
        raise WireError("(episode, step) keys repeat within the batch: each transition has its own key.")


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
def _header_and_arrays(message: Message) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON header and the arrays of ``message``, validated."""
    header: dict[str, Any] = {"kind": message.kind, "sender": check_name(message.sender, "sender")}
    if isinstance(message, Transitions):
        if not isinstance(message.schema, TransitionSchema) or not isinstance(message.batch, TransitionBatch):
            raise WireError("Transitions needs a TransitionBatch and a TransitionSchema.")
        arrays = _transition_arrays(message.seq, message.batch)
        _check_transitions(arrays, message.schema)
        first, last = int(arrays["seq"][0]), int(arrays["seq"][-1])
        return header | {"first_seq": first, "last_seq": last, "schema": message.schema.to_json()}, arrays
    if isinstance(message, Weights):
        _check_weights(message.arrays)
        return header | {"version": _int(message.version, "version")}, dict(message.arrays)
    if isinstance(message, Ack):
        acked = {check_name(a, "an acked actor id"): _int(s, f"acked[{a!r}]") for a, s in message.acked.items()}
        return header | {"acked": acked}, {}
    if isinstance(message, Heartbeat):
        fields = ("time_ns", "policy_version", "next_seq")
        return header | {f: _int(getattr(message, f), f) for f in fields}, {}
    raise WireError(f"cannot encode {type(message).__name__}: expected one of Transitions, Ack, Weights, Heartbeat.")


def encode(message: Message, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """``message`` as bytes, after the checks :func:`decode` makes (:class:`WireError` if one fails).

    Args:
        message: a :class:`Transitions`, :class:`Ack`, :class:`Weights` or :class:`Heartbeat`.
        max_bytes: the receiver's limit on one message.
    """
    header, arrays = _header_and_arrays(message)
    return frame(header, arrays, max_bytes)


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


def _unframe(data: bytes, max_bytes: int) -> tuple[dict[str, Any], memoryview]:
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
    if not isinstance(kind, str) or kind not in HEADER_FIELDS:
        raise WireError(f"unknown message kind {kind!r}; known: {', '.join(HEADER_FIELDS)}.")
    _fields(obj, HEADER_FIELDS[kind], f"{kind} header")
    check_name(obj["sender"], "sender")
    return obj


def _load_arrays(payload: memoryview) -> dict[str, np.ndarray]:
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
    return _unframe(data, max_bytes)[0]


def decode(data: bytes, schema: TransitionSchema | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    """The message in ``data``, validated completely; :class:`WireError` for anything malformed.

    Args:
        data: one message as :func:`encode` made it.
        schema: the receiver's schema, required for ``transitions`` (the sender's must equal it).
        max_bytes: larger messages are refused before they are parsed.
    """
    header, payload = _unframe(data, max_bytes)
    kind, sender = header["kind"], header["sender"]
    if kind in ROLLOUT_KINDS:
        raise WireError(
            f"a {kind} message belongs to the on-policy loop: decode it with rslkit.realworld.wire_rollout."
        )
    if kind == "transitions":
        return _decode_transitions(header, payload, schema)
    if kind == "weights":
        version = _int(header["version"], "version")
        arrays = _load_arrays(payload)
        _check_weights(arrays)
        return Weights(sender, version, arrays)
    if kind == "ack":
        if not isinstance(header["acked"], dict):
            raise WireError(f"acked must be an object actor id -> seq, got {header['acked']!r}.")
        acked = {check_name(a, "an acked actor id"): _int(s, f"acked[{a!r}]") for a, s in header["acked"].items()}
        message: Message = Ack(sender, acked)
    else:
        message = Heartbeat(sender, *(_int(header[f], f) for f in ("time_ns", "policy_version", "next_seq")))
    _names(_load_arrays(payload), set(), kind)
    return message


def _decode_transitions(header: dict[str, Any], payload: memoryview, schema: TransitionSchema | None) -> Transitions:
    if schema is None:
        raise WireError("decoding transitions needs the receiver's schema: pass schema=TransitionSchema(...).")
    sent = TransitionSchema.from_json(header["schema"])
    if sent != schema:
        theirs, ours = (json.dumps(s.to_json(), sort_keys=True) for s in (sent, schema))
        raise WireError(f"schema mismatch: the sender declares {theirs} but this receiver expects {ours}.")
    first, last = _int(header["first_seq"], "first_seq"), _int(header["last_seq"], "last_seq")
    arrays = _load_arrays(payload)
    _check_transitions(arrays, schema)
    if (int(arrays["seq"][0]), int(arrays["seq"][-1])) != (first, last):
        raise WireError(f"header says seq {first}..{last} but the arrays hold {arrays['seq'][0]}..{arrays['seq'][-1]}.")
    groups = {p: {g: arrays[f"{p}/{g}"] for g in schema.obs} for p in ("obs", "next_obs")}
    fields = ("action", "reward", "done", "truncated", "episode", "step", "policy_version", "intervention")
    batch = TransitionBatch(obs=groups["obs"], next_obs=groups["next_obs"], **{f: arrays[f] for f in fields})
    return Transitions(header["sender"], arrays["seq"], batch, schema)


# ---------------------------------------------------------------------------------------------------- for other codecs
# The on-policy loop's messages (rslkit.realworld.wire_rollout) share the frame and the checks of this module.
unframe = _unframe
load_arrays = _load_arrays
check_int = _int
check_fields = _fields
check_array = _check_array
check_array_names = _names
