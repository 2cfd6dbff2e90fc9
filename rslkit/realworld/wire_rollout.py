"""The on-policy loop's messages on the wire (:mod:`rslkit.realworld.wire`'s frame, its checks, no pickle).

Three kinds, besides the heartbeats and weights of the SAC loop::

    permit_request  actor -> learner  "I may collect again"; ``last_rollout``: the rollout it sent last (-1: none)
    permit          learner -> actor  "collect rollout ``rollout`` with weights of version >= ``policy_version``",
                                      with the learner's :class:`RolloutSchema` (the actor checks it against its own)
    rollout         actor -> learner  one whole rollout segment of one actor: ``obs/<group>: [T + 1, N, ...]`` (the
                                      last row is the observation GAE bootstraps from) and ``step/<name>: [T, N, ...]``
                                      (raw actions or ReinFlow's chains, behaviour log-probs, rewards, dones, ...),
                                      the rollout number of its permit and the weights version that acted

:func:`decode` checks a rollout completely against the receiver's schema (names, shapes, dtypes, finite floats,
0/1 booleans, ``time_out`` implies ``done``) and refuses anything else with a :class:`~rslkit.realworld.wire.
WireError`. Only numpy and safetensors are imported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rslkit.realworld import wire
from rslkit.realworld.wire import ArraySpec, WireError

REQUIRED_STEP = {"action": None, "log_prob": "float32", "reward": "float32", "done": "bool", "time_out": "bool"}
"""Per-step arrays every rollout holds (``action``'s dtype is the schema's); ``log_prob``, ``reward``, ``done`` and
``time_out`` are per env (shape ``()``)."""
MAX_STEPS = 1 << 16


def _specs(obj: object, what: str) -> dict[str, ArraySpec]:
    if not isinstance(obj, dict) or not obj:
        raise WireError(f"{what} must be a non-empty object name -> spec, got {obj!r}.")
    return {wire.check_name(k, f"a name in {what}"): ArraySpec.from_json(v, f"{what}.{k}") for k, v in obj.items()}


@dataclass(frozen=True)
class RolloutSchema:
    """What one actor's rollout looks like: ``steps`` T per env, ``envs`` N, and per env the shapes of the
    observation groups (``obs``) and of the per-step arrays (``step``: :data:`REQUIRED_STEP` plus the algorithm's
    extras, e.g. PPO's distribution parameters ``params.0``, ReinFlow's ``discount``). The learner builds it from
    its algorithm and announces it in every permit; the actor builds its own and must match."""

    steps: int
    envs: int
    obs: Mapping[str, ArraySpec]
    step: Mapping[str, ArraySpec]

    def __post_init__(self) -> None:
        for name in ("steps", "envs"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= MAX_STEPS:
                raise WireError(f"{name} must be an integer in [1, {MAX_STEPS}], got {value!r}.")
        for what in ("obs", "step"):
            specs = getattr(self, what)
            if not isinstance(specs, Mapping) or not specs or not all(isinstance(s, ArraySpec) for s in specs.values()):
                raise WireError(f"{what} must be a non-empty mapping name -> ArraySpec, got {specs!r}.")
            for name in specs:
                wire.check_name(name, f"a name in {what}")
            object.__setattr__(self, what, dict(sorted(specs.items())))
        for name, dtype in REQUIRED_STEP.items():
            spec = self.step.get(name)
            if spec is None or (dtype is not None and (spec.dtype, spec.shape) != (dtype, ())):
                want = "any spec" if dtype is None else f"a {dtype} scalar per env"
                raise WireError(f"step[{name!r}] must be {want}, got {spec!r}.")

    def to_json(self) -> dict[str, Any]:
        """``{"steps", "envs", "obs": {group: spec}, "step": {name: spec}}``."""
        return {
            "steps": self.steps,
            "envs": self.envs,
            "obs": {g: s.to_json() for g, s in self.obs.items()},
            "step": {n: s.to_json() for n, s in self.step.items()},
        }

    @classmethod
    def from_json(cls, obj: object) -> RolloutSchema:
        """Parse :meth:`to_json`'s output; :class:`WireError` for anything else."""
        obj = wire.check_fields(obj, {"steps", "envs", "obs", "step"}, "rollout schema")
        return cls(obj["steps"], obj["envs"], _specs(obj["obs"], "schema.obs"), _specs(obj["step"], "schema.step"))

    def describe(self) -> str:
        """The schema as sorted JSON (for error messages)."""
        return json.dumps(self.to_json(), sort_keys=True)


@dataclass(frozen=True, eq=False)
class Rollout:
    """Rollout ``rollout`` of actor ``sender``, collected by weights ``policy_version``.

    Attributes:
        obs: ``{group: [T + 1, N, *shape]}``; step: ``{name: [T, N, *shape]}`` as ``schema`` says.
    """

    sender: str
    rollout: int
    policy_version: int
    obs: Mapping[str, np.ndarray]
    step: Mapping[str, np.ndarray]
    schema: RolloutSchema
    kind: ClassVar[str] = "rollout"


@dataclass(frozen=True)
class PermitRequest:
    """Actor ``sender`` may collect a rollout; ``last_rollout`` is the last it sent (-1: none on this stream)."""

    sender: str
    last_rollout: int
    kind: ClassVar[str] = "permit_request"


@dataclass(frozen=True)
class Permit:
    """The learner's admission: collect rollout ``rollout`` with weights of version ``policy_version`` or newer."""

    sender: str
    rollout: int
    policy_version: int
    schema: RolloutSchema
    kind: ClassVar[str] = "permit"


OnPolicyMessage = Rollout | PermitRequest | Permit


def _check_rollout_arrays(arrays: Mapping[str, Any], schema: RolloutSchema) -> None:
    expected = {f"obs/{g}" for g in schema.obs} | {f"step/{n}" for n in schema.step}
    wire.check_array_names(arrays, expected, "rollout")
    t, n = schema.steps, schema.envs
    for group, spec in schema.obs.items():
        wire.check_array(f"obs/{group}", arrays[f"obs/{group}"], (t + 1, n, *spec.shape), spec.dtype)
    for name, spec in schema.step.items():
        wire.check_array(f"step/{name}", arrays[f"step/{name}"], (t, n, *spec.shape), spec.dtype)
    if (arrays["step/time_out"] & ~arrays["step/done"]).any():
        raise WireError("a time-out must also be done (done = terminated or timed out).")


def _arrays(message: Rollout) -> dict[str, Any]:
    if not isinstance(message.obs, Mapping) or not isinstance(message.step, Mapping):
        raise WireError("a rollout's obs and step must be mappings name -> array.")
    return {f"obs/{g}": a for g, a in message.obs.items()} | {f"step/{k}": a for k, a in message.step.items()}


def encode(message: OnPolicyMessage, max_bytes: int = wire.DEFAULT_MAX_BYTES) -> bytes:
    """``message`` as bytes, after the checks :func:`decode` makes (:class:`WireError` if one fails)."""
    header: dict[str, Any] = {"kind": message.kind, "sender": wire.check_name(message.sender, "sender")}
    arrays: dict[str, Any] = {}
    if isinstance(message, PermitRequest):
        header["last_rollout"] = wire.check_int(message.last_rollout, "last_rollout", low=-1)
    elif isinstance(message, (Permit, Rollout)):
        if not isinstance(message.schema, RolloutSchema):
            raise WireError(f"a {message.kind} needs a RolloutSchema, got {message.schema!r}.")
        header["rollout"] = wire.check_int(message.rollout, "rollout")
        header["policy_version"] = wire.check_int(message.policy_version, "policy_version")
        header["schema"] = message.schema.to_json()
        if isinstance(message, Rollout):
            arrays = _arrays(message)
            _check_rollout_arrays(arrays, message.schema)
    else:
        raise WireError(f"cannot encode {type(message).__name__}: expected Rollout, PermitRequest or Permit.")
    return wire.frame(header, arrays, max_bytes)


def _same_schema(header: dict[str, Any], schema: RolloutSchema | None, kind: str) -> RolloutSchema:
    sent = RolloutSchema.from_json(header["schema"])
    if schema is not None and sent != schema:
        raise WireError(
            f"{kind} schema mismatch: the sender declares {sent.describe()} but this receiver expects "
            f"{schema.describe()}: start learner and actors with the same --task, --num_envs, --algo and "
            "--agent.* settings."
        )
    return sent


def decode(
    data: bytes, schema: RolloutSchema | None = None, max_bytes: int = wire.DEFAULT_MAX_BYTES
) -> OnPolicyMessage | wire.Message:
    """The message in ``data``, validated completely; :class:`WireError` for anything malformed.

    Args:
        data: one message (an on-policy kind, or a heartbeat / weights of :mod:`rslkit.realworld.wire`).
        schema: the receiver's schema: required for rollouts, checked against permits when given.
        max_bytes: larger messages are refused before they are parsed.
    """
    header, payload = wire.unframe(data, max_bytes)
    kind, sender = header["kind"], header["sender"]
    if kind not in wire.ROLLOUT_KINDS:
        return wire.decode(data, None, max_bytes)
    arrays = wire.load_arrays(payload)
    if kind == "permit_request":
        wire.check_array_names(arrays, set(), kind)
        return PermitRequest(sender, wire.check_int(header["last_rollout"], "last_rollout", low=-1))
    rollout = wire.check_int(header["rollout"], "rollout")
    version = wire.check_int(header["policy_version"], "policy_version")
    if kind == "permit":
        wire.check_array_names(arrays, set(), kind)
        return Permit(sender, rollout, version, _same_schema(header, schema, kind))
    if schema is None:
        raise WireError("decoding a rollout needs the receiver's schema: pass schema=RolloutSchema(...).")
    _same_schema(header, schema, kind)
    _check_rollout_arrays(arrays, schema)
    obs = {g: arrays[f"obs/{g}"] for g in schema.obs}
    return Rollout(sender, rollout, version, obs, {k: arrays[f"step/{k}"] for k in schema.step}, schema)
