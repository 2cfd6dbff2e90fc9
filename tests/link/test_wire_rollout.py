"""The on-policy messages on the wire: round trips, refusals, and seeded mutations that only ever raise WireError."""

from __future__ import annotations

import random

import numpy as np
import pytest
from wire_samples import frame, split

from rslkit.link import wire
from rslkit.link.rollouts import Permit, PermitRequest, Rollout, RolloutSchema


def _steps() -> dict[str, wire.ArraySpec]:
    scalar, flag = wire.ArraySpec((), "float32"), wire.ArraySpec((), "bool")
    return {"action": wire.ArraySpec((1,), "float32"), "log_prob": scalar, "reward": scalar, "done": flag,
            "time_out": flag, "params.0": wire.ArraySpec((1,), "float32")}  # fmt: skip


SCHEMA = RolloutSchema(2, 3, {"policy": wire.ArraySpec((2,), "float32")}, _steps())


def rollout(k: int = 5, version: int = 1, seed: int = 0) -> Rollout:
    g = np.random.default_rng(seed)
    obs = {"policy": g.normal(size=(3, 3, 2)).astype(np.float32)}
    step = {n: (g.random((2, 3, *s.shape)) < 0.3) if s.dtype == "bool" else g.normal(size=(2, 3, *s.shape))
            for n, s in SCHEMA.step.items()}  # fmt: skip
    step = {n: a.astype(SCHEMA.step[n].dtype) for n, a in step.items()}
    step["done"] |= step["time_out"]
    return Rollout("actor-0", k, version, obs, step, SCHEMA)


def test_round_trips() -> None:
    good = rollout()
    back = wire.decode(wire.encode(good), SCHEMA)
    assert isinstance(back, Rollout) and (back.rollout, back.policy_version, back.sender) == (5, 1, "actor-0")
    assert all(np.array_equal(back.step[k], good.step[k]) for k in good.step)
    assert np.array_equal(back.obs["policy"], good.obs["policy"])
    permit = wire.decode(wire.encode(Permit("learner", 7, 3, SCHEMA)), SCHEMA)
    assert permit == Permit("learner", 7, 3, SCHEMA)
    request = wire.decode(wire.encode(PermitRequest("actor-0", -1)))
    assert request == PermitRequest("actor-0", -1)
    beat = wire.Heartbeat("actor-0", 1, 2, 3)
    assert wire.decode(wire.encode(beat)) == beat


def test_refusals() -> None:
    good = rollout()
    with pytest.raises(wire.WireError, match="needs the receiver's schema"):
        wire.decode(wire.encode(good))
    assert wire.decode(wire.encode(good), good.schema).rollout == good.rollout  # one registry decodes every kind
    with pytest.raises(wire.WireError, match="must be a bool scalar"):
        RolloutSchema(2, 3, SCHEMA.obs, {**_steps(), "done": wire.ArraySpec((), "float32")})
    with pytest.raises(wire.WireError, match="steps must be"):
        RolloutSchema(0, 3, SCHEMA.obs, _steps())
    bad = dict(good.step) | {"reward": np.full((2, 3), np.inf, np.float32)}
    with pytest.raises(wire.WireError, match="non-finite"):
        wire.encode(Rollout("actor-0", 0, 0, good.obs, bad, SCHEMA))
    other = RolloutSchema(2, 4, SCHEMA.obs, _steps())
    with pytest.raises(wire.WireError, match="permit schema mismatch"):
        wire.decode(wire.encode(Permit("learner", 0, 0, other)), SCHEMA)
    with pytest.raises(wire.WireError, match="last_rollout"):
        wire.encode(PermitRequest("actor-0", -2))


VALUES = [None, True, -1, 0, 1, 2, 3, 2**63, "", "x", "float32", [], {}, [3], {"shape": [2], "dtype": "bool"}]


def _mutate_structure(data: bytes, r: random.Random) -> bytes:
    """A frame with valid lengths and checksum around a header field or an array that was changed."""
    header, payload = split(data)
    arrays = wire.load_arrays(memoryview(payload))
    if r.random() < 0.5 or not arrays:
        target = header["schema"] if "schema" in header and r.random() < 0.5 else header
        key = r.choice(sorted(target))
        target[key] = r.choice(VALUES)
        return frame(header, payload)
    name = r.choice(sorted(arrays))
    a = arrays[name]
    choice = r.randrange(4)
    if choice == 0 and a.size and a.dtype.kind == "f":
        a.flat[r.randrange(a.size)] = r.choice([np.nan, np.inf])
    elif choice == 1:
        arrays[name] = a[:-1]
    elif choice == 2:
        arrays[name] = a.astype(np.float64)
    else:
        del arrays[name]
    return frame(header, arrays)


def test_mutations_only_raise_wire_errors() -> None:
    r = random.Random(0)
    data = [wire.encode(rollout(seed=i)) for i in range(3)]
    data.append(wire.encode(Permit("learner", 1, 1, SCHEMA)))
    decoded = 0
    for case in range(600):
        msg = bytearray(r.choice(data))
        if case % 2:
            msg = bytearray(_mutate_structure(bytes(msg), r))
        for _ in range(r.randint(1, 4) if case % 2 == 0 else 0):
            op, at = r.randrange(3), r.randrange(len(msg))
            if op == 0:
                msg[at] ^= 1 << r.randrange(8)
            elif op == 1:
                del msg[at : at + r.randint(1, 8)]
            else:
                msg[at:at] = bytes(r.randrange(256) for _ in range(r.randint(1, 8)))
        try:
            wire.decode(bytes(msg), SCHEMA, max_bytes=1 << 20)
            decoded += 1
        except wire.WireError:
            pass
    assert decoded < 100  # every failure above was a WireError; nearly every mutation is caught
