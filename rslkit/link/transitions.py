"""The off-policy loop's message kind ``transitions``: N consecutive transitions of one actor, validated against the
receiver's :class:`TransitionSchema` (names, shapes, dtypes, finite values, 0/1 booleans, strictly increasing
sequence numbers, ``truncated`` implies ``done``, unique (episode, step) keys). Importing this module registers the
kind in :data:`rslkit.link.wire.KINDS`. Only numpy and safetensors are imported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from rslkit.link import wire
from rslkit.link.wire import ArraySpec, WireError, check_name

TRANSITION_META = {"seq": "int64", "episode": "int64", "step": "int64", "policy_version": "int64"}
TRANSITION_FLAGS = ("done", "truncated", "intervention")
BATCH_FIELDS = ("action", "reward", "done", "truncated", "episode", "step", "policy_version", "intervention")
"""The per-transition arrays of a :class:`TransitionBatch` besides its observation groups."""


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
        obj = wire.check_fields(obj, {"obs", "action"}, "schema")
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


class Row(NamedTuple):
    """One transition as an actor records it: ``obs`` and ``next_obs`` ``{group: array}``, ``action [A]``."""

    obs: Mapping[str, np.ndarray]
    action: np.ndarray
    reward: float
    done: bool
    truncated: bool
    next_obs: Mapping[str, np.ndarray]
    episode: int
    step: int
    policy_version: int
    intervention: bool


def stack(rows: Sequence[Row], schema: TransitionSchema) -> TransitionBatch:
    """``rows`` as one batch of ``N = len(rows)`` transitions, cast to ``schema``'s dtypes."""
    groups = {p: {g: np.stack([getattr(r, p)[g] for r in rows]).astype(s.dtype) for g, s in schema.obs.items()}
              for p in ("obs", "next_obs")}  # fmt: skip
    return TransitionBatch(
        obs=groups["obs"],
        action=np.stack([r.action for r in rows]).astype(schema.action.dtype),
        reward=np.array([r.reward for r in rows], np.float32),
        done=np.array([r.done for r in rows], bool),
        truncated=np.array([r.truncated for r in rows], bool),
        next_obs=groups["next_obs"],
        episode=np.array([r.episode for r in rows], np.int64),
        step=np.array([r.step for r in rows], np.int64),
        policy_version=np.array([r.policy_version for r in rows], np.int64),
        intervention=np.array([r.intervention for r in rows], bool),
    )


def select(batch: TransitionBatch, rows: np.ndarray) -> TransitionBatch:
    """The transitions ``rows`` (a bool mask or indices) of ``batch``."""
    return TransitionBatch(
        obs={g: a[rows] for g, a in batch.obs.items()},
        next_obs={g: a[rows] for g, a in batch.next_obs.items()},
        **{f: getattr(batch, f)[rows] for f in BATCH_FIELDS},
    )


def with_rewards(batch: TransitionBatch, reward: np.ndarray) -> TransitionBatch:
    """``batch`` with its rewards replaced by ``reward [N]`` (ValueError for another shape or non-finite values)."""
    reward = np.asarray(reward, np.float32)
    if reward.shape != batch.reward.shape or not np.isfinite(reward).all():
        raise ValueError(
            f"the reward function returned shape {reward.shape} (or non-finite values) for {len(batch)} transitions; "
            "it must return finite rewards [N]."
        )
    fields = {f: getattr(batch, f) for f in BATCH_FIELDS if f != "reward"}
    return TransitionBatch(obs=batch.obs, next_obs=batch.next_obs, reward=reward, **fields)


def _transition_arrays(seq: object, batch: TransitionBatch) -> dict[str, Any]:
    if not isinstance(batch.obs, Mapping) or not isinstance(batch.next_obs, Mapping):
        raise WireError("obs and next_obs must be mappings group -> array [N, ...].")
    arrays: dict[str, Any] = {f"obs/{g}": a for g, a in batch.obs.items()}
    arrays |= {f"next_obs/{g}": a for g, a in batch.next_obs.items()}
    return arrays | {"seq": seq} | {f: getattr(batch, f) for f in BATCH_FIELDS}


def _check_transitions(arrays: Mapping[str, Any], schema: TransitionSchema) -> None:
    """Names, shapes, dtypes and values of a transition batch's arrays, and its ordering rules."""
    expected = {f"{p}/{g}" for p in ("obs", "next_obs") for g in schema.obs} | set(TRANSITION_META)
    wire.check_array_names(arrays, expected | {"action", "reward"} | set(TRANSITION_FLAGS), "transitions")
    seq = arrays["seq"]
    if not isinstance(seq, np.ndarray) or seq.ndim != 1 or len(seq) < 1:
        raise WireError(f"array 'seq' must be [N] int64 with N >= 1, got {getattr(seq, 'shape', seq)!r}.")
    n = len(seq)
    for group, spec in schema.obs.items():
        for prefix in ("obs", "next_obs"):
            wire.check_array(f"{prefix}/{group}", arrays[f"{prefix}/{group}"], (n, *spec.shape), spec.dtype)
    wire.check_array("action", arrays["action"], (n, *schema.action.shape), schema.action.dtype)
    wire.check_array("reward", arrays["reward"], (n,), "float32")
    for name, dtype in TRANSITION_META.items():
        wire.check_array(name, arrays[name], (n,), dtype)
        if arrays[name].min() < 0:
            raise WireError(f"array {name!r} holds negative values; it counts from 0.")
    for name in TRANSITION_FLAGS:
        wire.check_array(name, arrays[name], (n,), "bool")
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


def _encode(message: Transitions) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(message.schema, TransitionSchema) or not isinstance(message.batch, TransitionBatch):
        raise WireError("Transitions needs a TransitionBatch and a TransitionSchema.")
    arrays = _transition_arrays(message.seq, message.batch)
    _check_transitions(arrays, message.schema)
    first, last = int(arrays["seq"][0]), int(arrays["seq"][-1])
    return {"first_seq": first, "last_seq": last, "schema": message.schema.to_json()}, arrays


def _decode(header: dict[str, Any], payload: memoryview, schema: Any) -> Transitions:
    if not isinstance(schema, TransitionSchema):
        raise WireError("decoding transitions needs the receiver's schema (a TransitionSchema).")
    sent = TransitionSchema.from_json(header["schema"])
    if sent != schema:
        theirs, ours = (json.dumps(s.to_json(), sort_keys=True) for s in (sent, schema))
        raise WireError(f"schema mismatch: the sender declares {theirs} but this receiver expects {ours}.")
    first, last = wire.check_int(header["first_seq"], "first_seq"), wire.check_int(header["last_seq"], "last_seq")
    arrays = wire.load_arrays(payload)
    _check_transitions(arrays, schema)
    if (int(arrays["seq"][0]), int(arrays["seq"][-1])) != (first, last):
        raise WireError(f"header says seq {first}..{last} but the arrays hold {arrays['seq'][0]}..{arrays['seq'][-1]}.")
    groups = {p: {g: arrays[f"{p}/{g}"] for g in schema.obs} for p in ("obs", "next_obs")}
    batch = TransitionBatch(obs=groups["obs"], next_obs=groups["next_obs"], **{f: arrays[f] for f in BATCH_FIELDS})
    return Transitions(header["sender"], arrays["seq"], batch, schema)


wire.register(wire.Kind("transitions", Transitions, frozenset({"first_seq", "last_seq", "schema"}), _encode, _decode))
