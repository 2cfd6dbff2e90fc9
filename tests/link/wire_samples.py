"""Test helpers: small valid messages of every kind, a frame builder from the documented layout, message comparison
and byte mutations."""

from __future__ import annotations

import json
import random
import struct
import zlib
from typing import Any

import numpy as np
from safetensors.numpy import save

from rslkit.link import wire
from rslkit.link.transitions import TransitionBatch, Transitions, TransitionSchema

SCHEMA = TransitionSchema(
    {"policy": wire.ArraySpec((3,), "float32"), "pixels": wire.ArraySpec((2, 2, 1), "uint8")},
    wire.ArraySpec((2,), "float32"),
)


def random_array(spec: wire.ArraySpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, *spec.shape]`` random values of ``spec.dtype`` (floats in [-1, 1])."""
    shape = (n, *spec.shape)
    if spec.dtype.startswith("float"):
        return rng.uniform(-1, 1, shape).astype(spec.dtype)
    return rng.integers(0, 2 if spec.dtype == "bool" else 100, shape).astype(spec.dtype)


def make_batch(
    n: int, rng: np.random.Generator, episode: int = 0, start_step: int = 0, schema: TransitionSchema = SCHEMA
) -> TransitionBatch:
    """``n`` random transitions of ``schema``, steps ``start_step ..`` of ``episode``; the last one is done."""
    done = np.zeros(n, bool)
    done[-1] = True
    return TransitionBatch(
        obs={g: random_array(spec, n, rng) for g, spec in schema.obs.items()},
        action=random_array(schema.action, n, rng),
        reward=rng.standard_normal(n).astype(np.float32),
        done=done,
        truncated=done & (rng.random(n) < 0.5),
        next_obs={g: random_array(spec, n, rng) for g, spec in schema.obs.items()},
        episode=np.full(n, episode, np.int64),
        step=np.arange(start_step, start_step + n, dtype=np.int64),
        policy_version=np.full(n, 3, np.int64),
        intervention=rng.random(n) < 0.3,
    )


def sample_messages(rng: np.random.Generator) -> list[wire.Message]:
    """One valid message of each kind."""
    return [
        Transitions("actor-0", np.arange(10, 14, dtype=np.int64), make_batch(4, rng, episode=2), SCHEMA),
        wire.Ack("learner", {"actor-0": 13, "actor-1": 0}),
        wire.Weights("learner", 7, {"actor.0.weight": rng.standard_normal((4, 3)).astype(np.float32),
                                    "policy.onnx": rng.integers(0, 256, 32, dtype=np.uint8)}),
        wire.Heartbeat("actor-0", time_ns=1_700_000_000_000_000_000, policy_version=7, next_seq=14),
    ]  # fmt: skip


def frame(header: dict[str, Any] | bytes, payload: dict[str, np.ndarray] | bytes) -> bytes:
    """A frame with correct lengths and checksum around any header and payload (docs/realworld.md layout)."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    body = payload if isinstance(payload, bytes) else save(payload)
    head = b"RSLW" + struct.pack("<HHIQ", 1, 0, len(text), len(body))
    crc = zlib.crc32(text + body, zlib.crc32(head))
    return head + struct.pack("<I", crc) + text + body


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The JSON header and the payload bytes of a valid frame."""
    header_len = struct.unpack_from("<I", data, 8)[0]
    return json.loads(data[24 : 24 + header_len]), data[24 + header_len :]


def arrays_of(message: wire.Message) -> dict[str, np.ndarray]:
    """Every array of a message, flat."""
    if isinstance(message, wire.Weights):
        return dict(message.arrays)
    if isinstance(message, Transitions):
        b = message.batch
        out = {f"obs/{g}": a for g, a in b.obs.items()} | {f"next_obs/{g}": a for g, a in b.next_obs.items()}
        names = ("action", "reward", "done", "truncated", "episode", "step", "policy_version", "intervention")
        return out | {"seq": message.seq} | {n: getattr(b, n) for n in names}
    return {}


def same(a: wire.Message, b: wire.Message) -> bool:
    """Equal kind, scalar fields and arrays (values, dtypes, shapes)."""
    if type(a) is not type(b) or a.sender != b.sender:
        return False
    if isinstance(a, (wire.Ack, wire.Heartbeat)):
        return a == b
    if isinstance(a, wire.Weights) and a.version != b.version:  # type: ignore[union-attr]
        return False
    if isinstance(a, Transitions) and a.schema != b.schema:  # type: ignore[union-attr]
        return False
    x, y = arrays_of(a), arrays_of(b)
    return x.keys() == y.keys() and all(
        x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and np.array_equal(x[k], y[k]) for k in x
    )


def mutate_bytes(data: bytes, r: random.Random) -> bytes:
    """A different byte string: 1-4 bytes changed, truncated, bytes inserted, deleted or repeated."""
    while True:
        b, op, i = bytearray(data), r.randrange(5), r.randrange(max(len(data), 1))
        if op == 0:
            for j in [i] + [r.randrange(len(b)) for _ in range(r.randrange(4))]:
                b[j] = (b[j] + r.randrange(1, 256)) % 256
        elif op == 1:
            b = b[:i]
        elif op == 2:
            b[i:i] = r.randbytes(r.randint(1, 16))
        elif op == 3:
            del b[i : i + r.randint(1, 16)]
        else:
            b[i:i] = b[i : i + r.randint(1, 64)]
        if bytes(b) != data:
            return bytes(b)
