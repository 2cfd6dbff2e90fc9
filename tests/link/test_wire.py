"""The wire format: round trips of every kind, and a clear WireError for each way a message can be wrong."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from wire_samples import SCHEMA, arrays_of, frame, make_batch, same, sample_messages, split

from rslkit.link import wire
from rslkit.link.transitions import TransitionBatch, Transitions, TransitionSchema

PACKAGE = Path(__file__).resolve().parents[2] / "rslkit" / "link"


def _transitions() -> Transitions:
    message = sample_messages(np.random.default_rng(0))[0]
    assert isinstance(message, Transitions)
    return message


@pytest.mark.parametrize("index", range(4), ids=["transitions", "ack", "weights", "heartbeat"])
def test_every_kind_round_trips(index: int) -> None:
    message = sample_messages(np.random.default_rng(0))[index]
    data = wire.encode(message)
    back = wire.decode(data, SCHEMA)
    assert same(back, message)
    assert wire.encode(back) == data, "encoding is deterministic"
    assert all(a.flags.writeable for a in arrays_of(back).values())


def test_strided_arrays_travel_as_their_values() -> None:
    matrix = np.arange(24, dtype=np.float32).reshape(4, 6)
    message = wire.Weights("learner", 1, {"w": matrix.T, "every_other": matrix[:, ::2]})
    back = wire.decode(wire.encode(message))
    assert isinstance(back, wire.Weights)
    assert np.array_equal(back.arrays["w"], matrix.T) and np.array_equal(back.arrays["every_other"], matrix[:, ::2])


def test_schema_from_gymnasium_spaces_and_json() -> None:
    obs = gym.spaces.Dict(
        {"policy": gym.spaces.Box(-1, 1, (3,)), "pixels": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8)}
    )
    assert TransitionSchema.from_spaces(obs, gym.spaces.Box(-1, 1, (2,))) == SCHEMA
    single = TransitionSchema.from_spaces(gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(3))
    assert single == TransitionSchema({"policy": wire.ArraySpec((5,), "float32")}, wire.ArraySpec((), "int64"))
    assert TransitionSchema.from_json(json.loads(json.dumps(SCHEMA.to_json()))) == SCHEMA
    with pytest.raises(wire.WireError, match="dtype must be one of"):
        wire.ArraySpec((2,), "complex64")


# ---------------------------------------------------------------------------------------------------- refusals
def _patched_prefix(fmt_offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(wire.encode(_transitions()))
    struct.pack_into(fmt, data, fmt_offset, value)
    return bytes(data)


def _with_header(edit: Callable[[dict[str, Any]], object], index: int = 0) -> bytes:
    header, payload = split(wire.encode(sample_messages(np.random.default_rng(0))[index]))
    edit(header)
    return frame(header, payload)


def _with_arrays(edit: Callable[[dict[str, np.ndarray], dict[str, Any]], object], index: int = 0) -> bytes:
    message = sample_messages(np.random.default_rng(0))[index]
    header, _ = split(wire.encode(message))
    arrays = {k: a.copy() for k, a in arrays_of(message).items()}
    edit(arrays, header)
    return frame(header, arrays)


def _bool_byte(name: str, value: int) -> bytes:
    """The transitions message with one raw byte of bool array ``name`` set to ``value`` (checksum redone)."""
    header, payload = split(wire.encode(_transitions()))
    st_len = struct.unpack_from("<Q", payload)[0]
    begin = json.loads(payload[8 : 8 + st_len])[name]["data_offsets"][0]
    body = bytearray(payload)
    body[8 + st_len + begin] = value
    return frame(header, bytes(body))


def _set(obj: dict[str, Any], key: str, value: object) -> None:
    obj[key] = value


def _setitem(arrays: dict[str, np.ndarray], key: str, index: int, value: object) -> None:
    arrays[key][index] = value


REFUSED: dict[str, tuple[Callable[[], bytes], str]] = {
    "magic": (lambda: b"XXXX" + wire.encode(_transitions())[4:], "not an rslkit wire message"),
    "version": (lambda: _patched_prefix(4, "<H", 2), "version 2 is not supported"),
    "flags": (lambda: _patched_prefix(6, "<H", 1), "unknown flags"),
    "header too long": (lambda: _patched_prefix(8, "<I", 70_000), "longer than the limit"),
    "short": (lambda: wire.encode(_transitions())[:10], "truncated"),
    "truncated": (lambda: wire.encode(_transitions())[:-1], "frame declares"),
    "trailing bytes": (lambda: wire.encode(_transitions()) + b"\0", "frame declares"),
    "checksum": (lambda: wire.encode(_transitions())[:-3] + b"\x01\x02\x03", "checksum mismatch"),
    "not UTF-8": (lambda: frame(b'{"kind": "\xff"}', b""), "not UTF-8 JSON"),
    "not JSON": (lambda: frame(b"{nope", b""), "not UTF-8 JSON"),
    "deep JSON": (lambda: frame(b"[" * 60_000, b""), "not UTF-8 JSON"),
    "not an object": (lambda: frame(b"[1, 2]", b""), "must be a JSON object"),
    "repeated key": (lambda: frame(b'{"kind": "ack", "kind": "ack"}', b""), "repeats a JSON key"),
    "NaN in header": (lambda: frame(b'{"kind": "heartbeat", "time_ns": NaN}', b""), "is an integer"),
    "unknown kind": (lambda: _with_header(lambda h: _set(h, "kind", "reboot")), "unknown message kind 'reboot'"),
    "missing field": (lambda: _with_header(lambda h: h.pop("last_seq")), "missing fields ['last_seq']."),
    "extra field": (lambda: _with_header(lambda h: _set(h, "admin", True)), ": unexpected fields ['admin']."),
    "bad sender": (lambda: _with_header(lambda h: _set(h, "sender", "../etc")), "sender must be"),
    "float field": (lambda: _with_header(lambda h: _set(h, "time_ns", 1.5), 3), "is an integer"),
    "string field": (lambda: _with_header(lambda h: _set(h, "next_seq", "14"), 3), "next_seq must be an integer"),
    "bool field": (lambda: _with_header(lambda h: _set(h, "version", True), 2), "version must be an integer"),
    "negative field": (lambda: _with_header(lambda h: _set(h, "policy_version", -1), 3), "must be an integer in"),
    "huge field": (lambda: _with_header(lambda h: _set(h, "next_seq", 2**64), 3), "must be an integer in"),
    "acked not a map": (lambda: _with_header(lambda h: _set(h, "acked", [1]), 1), "acked must be an object"),
    "schema mismatch": (
        lambda: _with_header(lambda h: _set(h["schema"]["obs"]["policy"], "shape", [4])),
        "schema mismatch",
    ),
    "bad schema": (lambda: _with_header(lambda h: _set(h["schema"], "obs", {})), "non-empty mapping"),
    "first_seq": (lambda: _with_header(lambda h: _set(h, "first_seq", 9)), "header says seq 9..13"),
    "not safetensors": (lambda: frame(split(wire.encode(_transitions()))[0], b"garbage!"), "not valid safetensors"),
    "missing array": (lambda: _with_arrays(lambda a, h: a.pop("reward")), "missing arrays ['reward']"),
    "extra array": (lambda: _with_arrays(lambda a, h: _set(a, "x", np.zeros(1))), "unexpected arrays ['x']"),
    "ack with arrays": (lambda: _with_arrays(lambda a, h: _set(a, "x", np.zeros(1)), 1), "unexpected arrays ['x']"),
    "shape": (lambda: _with_arrays(lambda a, h: _set(a, "reward", a["reward"][:3])), "float32 [3]: check the schema"),
    "dtype": (
        lambda: _with_arrays(lambda a, h: _set(a, "obs/policy", a["obs/policy"].astype(np.float64))),
        "'obs/policy': expected float32 [4, 3], got float64 [4, 3]: cast with .astype(np.float32).",
    ),
    "NaN obs": (lambda: _with_arrays(lambda a, h: _setitem(a, "next_obs/policy", 2, np.nan)), "non-finite"),
    "inf reward": (lambda: _with_arrays(lambda a, h: _setitem(a, "reward", 0, np.inf)), "non-finite"),
    "NaN weight": (lambda: _with_arrays(lambda a, h: _setitem(a, "actor.0.weight", 1, np.nan), 2), "non-finite"),
    "bool byte": (lambda: _bool_byte("intervention", 2), "bytes other than 0 and 1"),
    "seq order": (lambda: _with_arrays(lambda a, h: _setitem(a, "seq", 1, 12)), "strictly increase"),
    "seq repeat": (lambda: _with_arrays(lambda a, h: _setitem(a, "seq", 2, 11)), "strictly increase"),
    "negative step": (lambda: _with_arrays(lambda a, h: _setitem(a, "step", 0, -1)), "'step' holds negative"),
    "key repeat": (lambda: _with_arrays(lambda a, h: _setitem(a, "step", 1, 0)), "keys repeat"),
    "truncated not done": (lambda: _with_arrays(lambda a, h: _setitem(a, "truncated", 0, True)), "also be done"),
    "empty weights": (lambda: frame({"kind": "weights", "sender": "l", "version": 1}, {}), "at least one array"),
    "weight name": (
        lambda: frame({"kind": "weights", "sender": "l", "version": 1}, {"no spaces": np.zeros(1)}),
        "weight name",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_decode_refuses_with_a_clear_error(case: str) -> None:
    build, message = REFUSED[case]
    with pytest.raises(wire.WireError, match=re.escape(message)):
        wire.decode(build(), SCHEMA)


def test_size_limit_is_checked_before_parsing() -> None:
    with pytest.raises(wire.WireError, match="exceeds max_bytes=100"):
        wire.decode(b"\0" * 101, SCHEMA, max_bytes=100)
    data = wire.encode(_transitions())
    with pytest.raises(wire.WireError, match="exceeds max_bytes"):
        wire.decode(data, SCHEMA, max_bytes=len(data) - 1)
    with pytest.raises(wire.WireError, match="exceeds max_bytes"):
        wire.encode(_transitions(), max_bytes=len(data) - 1)


def test_transitions_need_the_receivers_schema() -> None:
    with pytest.raises(wire.WireError, match="needs the receiver's schema"):
        wire.decode(wire.encode(_transitions()))


def test_encode_refuses_what_decode_would() -> None:
    rng = np.random.default_rng(1)
    batch = make_batch(3, rng)
    seq = np.arange(3, dtype=np.int64)
    batch.obs["policy"][1, 0] = np.nan
    with pytest.raises(wire.WireError, match="'obs/policy' holds 1 non-finite"):
        wire.encode(Transitions("a", seq, batch, SCHEMA))
    batch = make_batch(3, rng)
    bad = TransitionBatch(**{**batch.__dict__, "action": batch.action.astype(np.float64)})
    with pytest.raises(wire.WireError, match=r"astype\(np.float32\)"):
        wire.encode(Transitions("a", seq, bad, SCHEMA))
    bad = TransitionBatch(**{**batch.__dict__, "reward": [0.0, 1.0, 2.0]})
    with pytest.raises(wire.WireError, match="must be a numpy array"):
        wire.encode(Transitions("a", seq, bad, SCHEMA))
    with pytest.raises(wire.WireError, match="sender must be"):
        wire.encode(wire.Heartbeat("actor 0", 0, 0, 0))
    with pytest.raises(wire.WireError, match="N >= 1"):
        wire.encode(Transitions("a", seq[:0], batch, SCHEMA))


def test_encoding_transitions_imports_nothing_on_the_control_path() -> None:
    """The first encode must not import a module (numpy.ma once took ~30 ms under the GIL on a robot's first append)."""
    code = (
        "import sys, numpy as np\n"
        "sys.path.insert(0, 'tests/link')\n"
        "from wire_samples import SCHEMA, make_batch\n"
        "from rslkit.link import wire\n"
        "from rslkit.link.transitions import Transitions\n"
        "batch = make_batch(5, np.random.default_rng(0))\n"
        "m = Transitions('a', np.arange(5, dtype=np.int64), batch, SCHEMA)\n"
        "before = set(sys.modules)\n"
        "wire.decode(wire.encode(m), SCHEMA)\n"
        "assert set(sys.modules) == before, sorted(set(sys.modules) - before)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=PACKAGE.parents[1])


def test_importing_the_robot_side_loads_no_torch() -> None:
    code = (
        "import sys, importlib, numpy as np\n"
        f"for name in {sorted(TORCH_FREE)}: importlib.import_module(name)\n"
        "from rslkit.link import wire\n"
        "m = wire.Heartbeat('a', 1, 2, 3)\n"
        "assert wire.decode(wire.encode(m)) == m\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


FORBIDDEN = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib", "eval", "exec", "allow_pickle"}
TORCH_FREE = {
    *(f"rslkit.link.{m}" for m in (
        "wire", "transitions", "rollouts", "segment_log", "spool", "journal", "spool_writer", "episodes",
        "transport", "server", "sink", "client",
    )),
    "rslkit.realworld.interventions", "rslkit.realworld.teleop", "rslkit.realworld.rewards",
}  # fmt: skip
"""The modules the robot side runs (no torch there); the learner, the torch actor and the simulated robot use torch."""


def test_no_pickle_marshal_or_eval_in_the_package() -> None:
    """Every name in the code of rslkit/link and rslkit/realworld (docstrings, comments and methods such as
    ``module.eval()`` aside), like a grep that reads code; and no torch at all in the modules of the robot side."""
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "realworld").rglob("*.py")]):
        module = "rslkit." + ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        forbidden = FORBIDDEN | {"__import__"} | ({"torch"} if module in TORCH_FREE else set())
        previous = None
        with path.open("rb") as f:
            for tok in tokenize.tokenize(f.readline):
                attribute = previous is not None and previous.type == tokenize.OP and previous.string == "."
                if tok.type == tokenize.NAME and tok.string in forbidden and not attribute:
                    found.append(f"{path.name}:{tok.start[0]}: {tok.string}")
                if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                    previous = tok
    assert not found, found
