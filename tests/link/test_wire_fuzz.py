"""Fuzzing the decoder: 2,000 seeded mutations of valid messages only ever raise WireError, each within a bound.

Raw byte mutations (flips, truncations, insertions, deletions, repeats) are caught by the lengths and the checksum;
to reach the checks behind them, the other modes mutate the header or the payload and then redo lengths and
checksum (the frame builder of ``wire_samples``), at the byte level and structurally. When a mutated message
decodes, the result must pass the encoder's checks and survive a second round trip unchanged.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from wire_samples import SCHEMA, arrays_of, frame, make_batch, mutate_bytes, same, sample_messages, split

from rslkit.link import wire
from rslkit.link.transitions import Transitions

CASES = 2000
LIMIT = 1 << 20
VALUES: list[Any] = [None, True, False, -1, 0, 1, 3, 13, 2**63, 2**64, "", "x" * 70, "actor-0", "float32", "ack"]
VALUES += [[], {}, [1, 2], [4, 3], {"a": 1}, {"shape": [3], "dtype": "float32"}]
POKES: dict[str, list[Any]] = {"f": [np.nan, np.inf, -np.inf, 0.5], "b": [True, False], "u": [0, 1, 11, 13, 255]}
POKES["i"] = [-1, 0, 1, 10, 11, 13, 2**40]


def _containers(obj: Any) -> list[Any]:
    out = [obj] if isinstance(obj, (dict, list)) else []
    children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else []
    return out + [c for child in children for c in _containers(child)]


def mutate_json(header: dict[str, Any], r: random.Random) -> dict[str, Any]:
    """Delete, replace or add one entry somewhere in the header."""
    target = r.choice(_containers(header))
    op, value = r.randrange(3), r.choice(VALUES)
    if isinstance(target, dict):
        key = r.choice(list(target)) if target else "k"
        if op == 0 and target:
            del target[key]
        elif op == 1:
            target[key] = value
        else:
            target[r.choice(["admin", "kind", "seq", "obs", key + "_"])] = value
    elif op == 0 and target:
        target.pop(r.randrange(len(target)))
    elif op == 1 and target:
        target[r.randrange(len(target))] = value
    else:
        target.append(value)
    return header


def mutate_arrays(arrays: dict[str, np.ndarray], r: random.Random) -> dict[str, np.ndarray]:
    """Drop, add, retype, reshape or poke one array."""
    name, op = r.choice(sorted(arrays)) if arrays else "x", r.randrange(6)
    if op == 0 and arrays:
        del arrays[name]
    elif op == 1:
        arrays[name + r.choice(["", "_", "/extra"])] = np.zeros(r.randint(1, 4), r.choice(["float32", "int64", "bool"]))
    elif op == 2 and arrays:
        arrays[name] = arrays[name].astype(r.choice(["float64", "float16", "int32", "int64", "uint8", "bool"]))
    elif op == 3 and arrays:
        arrays[name] = arrays[name].reshape(-1)[: r.randint(0, arrays[name].size)]
    elif arrays and arrays[name].size:
        flat = arrays[name].reshape(-1)
        flat[r.randrange(flat.size)] = r.choice(POKES[flat.dtype.kind])
    return arrays


def _bases() -> list[wire.Message]:
    messages = sample_messages(np.random.default_rng(1))
    batch = make_batch(1, np.random.default_rng(2), episode=5, start_step=7)
    return messages + [Transitions("actor-9", np.array([0], np.int64), batch, SCHEMA)]


def _modes() -> dict[str, Callable[[wire.Message, bytes, random.Random], bytes]]:
    def header_bytes(m: wire.Message, data: bytes, r: random.Random) -> bytes:
        header, payload = split(data)
        return frame(mutate_bytes(json.dumps(header).encode(), r), payload)

    def header_json(m: wire.Message, data: bytes, r: random.Random) -> bytes:
        header, payload = split(data)
        return frame(mutate_json(header, r), payload)

    def payload_bytes(m: wire.Message, data: bytes, r: random.Random) -> bytes:
        header, payload = split(data)
        return frame(header, mutate_bytes(payload, r))

    def payload_arrays(m: wire.Message, data: bytes, r: random.Random) -> bytes:
        arrays = {k: a.copy() for k, a in arrays_of(m).items()}
        return frame(split(data)[0], mutate_arrays(arrays, r))

    def raw(m: wire.Message, data: bytes, r: random.Random) -> bytes:
        return mutate_bytes(data, r)

    return {f.__name__: f for f in (raw, header_bytes, header_json, payload_bytes, payload_arrays)}


def test_mutated_messages_only_ever_raise_wire_error() -> None:
    r = random.Random(14)
    bases = [(m, wire.encode(m)) for m in _bases()]
    modes = _modes()
    outcomes: Counter[str] = Counter()
    errors: set[str] = set()
    slowest = 0.0
    for case in range(CASES):
        mode = r.choice(sorted(modes))
        message, data = r.choice(bases)
        mutated = modes[mode](message, data, r)
        start = time.perf_counter()
        try:
            decoded = wire.decode(mutated, SCHEMA, max_bytes=LIMIT)
        except wire.WireError as err:
            outcomes[f"{mode}: refused"] += 1
            errors.add(" ".join(str(err).split()[:3]))
        except Exception as err:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"case {case} ({mode}) raised {type(err).__name__}: {err}") from err
        else:
            outcomes[f"{mode}: decoded"] += 1
            assert mode != "raw", f"case {case}: a raw mutation passed the checksum"
            again = wire.decode(wire.encode(decoded), SCHEMA)  # encode re-checks everything
            assert same(again, decoded), f"case {case} ({mode}) does not round-trip"
        slowest = max(slowest, time.perf_counter() - start)
    assert slowest < 1.0, f"one decode took {slowest:.3f} s"
    assert sum(outcomes.values()) == CASES
    assert all(outcomes[f"{mode}: refused"] > 50 for mode in modes), outcomes
    assert len(errors) >= 20, f"the mutations reach too few checks: {sorted(errors)}"
