"""The on-policy loop's message kinds (:mod:`rslkit.link.wire`'s frame, its checks, no pickle).

Three kinds, besides the heartbeats and weights of the SAC loop::

    permit_request  actor -> learner  "I may collect again"; ``last_rollout``: the rollout it sent last (-1: none)
    permit          learner -> actor  "collect rollout ``rollout`` with weights of version >= ``policy_version``",
                                      with the learner's :class:`RolloutSchema` (the actor checks it against its own)
    rollout         actor -> learner  one whole rollout segment of one actor: ``obs/<group>: [T + 1, N, ...]`` (the
                                      last row is the observation GAE bootstraps from) and ``step/<name>: [T, N, ...]``
                                      (raw actions or ReinFlow's chains, behaviour log-probs, rewards, dones, ...),
                                      the rollout number of its permit and the weights version that acted

:func:`rslkit.link.wire.decode` checks a rollout completely against the receiver's schema (names, shapes, dtypes,
finite floats, 0/1 booleans, ``time_out`` implies ``done``) and refuses anything else with a
:class:`~rslkit.link.wire.WireError`. Importing this module registers the three kinds in
:data:`rslkit.link.wire.KINDS`. Only numpy and safetensors are imported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rslkit.link import wire
from rslkit.link.wire import ArraySpec, WireError

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


def _encode_request(message: PermitRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"last_rollout": wire.check_int(message.last_rollout, "last_rollout", low=-1)}, {}


def _encode_granted(message: Permit | Rollout) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(message.schema, RolloutSchema):
        raise WireError(f"a {message.kind} needs a RolloutSchema, got {message.schema!r}.")
    header = {
        "rollout": wire.check_int(message.rollout, "rollout"),
        "policy_version": wire.check_int(message.policy_version, "policy_version"),
        "schema": message.schema.to_json(),
    }
    arrays: dict[str, Any] = {}
    if isinstance(message, Rollout):
        arrays = _arrays(message)
        _check_rollout_arrays(arrays, message.schema)
    return header, arrays


def _same_schema(header: dict[str, Any], schema: Any, kind: str) -> RolloutSchema:
    """The sender's schema; a receiver's :class:`RolloutSchema` must equal it."""
    sent = RolloutSchema.from_json(header["schema"])
    if isinstance(schema, RolloutSchema) and sent != schema:
        raise WireError(
            f"{kind} schema mismatch: the sender declares {sent.describe()} but this receiver expects "
            f"{schema.describe()}: start learner and actors with the same --task, --learner.actor_envs, --algo and "
            "--agent.* settings."
        )
    return sent


def _decode_request(header: dict[str, Any], payload: memoryview, schema: Any) -> PermitRequest:
    wire.no_arrays(payload, "permit_request")
    return PermitRequest(header["sender"], wire.check_int(header["last_rollout"], "last_rollout", low=-1))


def _decode_permit(header: dict[str, Any], payload: memoryview, schema: Any) -> Permit:
    rollout = wire.check_int(header["rollout"], "rollout")
    version = wire.check_int(header["policy_version"], "policy_version")
    wire.no_arrays(payload, "permit")
    return Permit(header["sender"], rollout, version, _same_schema(header, schema, "permit"))


def _decode_rollout(header: dict[str, Any], payload: memoryview, schema: Any) -> Rollout:
    rollout = wire.check_int(header["rollout"], "rollout")
    version = wire.check_int(header["policy_version"], "policy_version")
    if not isinstance(schema, RolloutSchema):
        raise WireError("decoding a rollout needs the receiver's schema (a RolloutSchema).")
    _same_schema(header, schema, "rollout")
    arrays = wire.load_arrays(payload)
    _check_rollout_arrays(arrays, schema)
    obs = {g: arrays[f"obs/{g}"] for g in schema.obs}
    return Rollout(header["sender"], rollout, version, obs, {k: arrays[f"step/{k}"] for k in schema.step}, schema)


GRANTED = frozenset({"rollout", "policy_version", "schema"})
wire.register(wire.Kind("permit_request", PermitRequest, frozenset({"last_rollout"}), _encode_request, _decode_request))
wire.register(wire.Kind("permit", Permit, GRANTED, _encode_granted, _decode_permit))
wire.register(wire.Kind("rollout", Rollout, GRANTED, _encode_granted, _decode_rollout))
