"""VLASH future-state conditioning: roll the robot state forward through the actions that run during inference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rslkit.deploy.metadata import PolicyMetadata

FutureStateMode = Literal["none", "absolute", "delta"]


def roll_forward(state: np.ndarray, pending: np.ndarray, mode: FutureStateMode) -> np.ndarray:
    """The state expected once ``pending`` actions have executed.

    Args:
        state: current state ``[S]`` (e.g. joint positions).
        pending: ``[n, S]`` actions that execute before the new chunk starts (``n`` may be 0).
        mode: ``absolute`` (actions are absolute targets: the last one), ``delta`` (actions add to the state: their
            sum), ``none`` (the state as observed).

    Returns:
        ``[S]`` future state.

    Raises:
        ValueError: for an unknown mode or mismatched sizes.
    """
    state = np.asarray(state)
    pending = np.asarray(pending).reshape(-1, state.shape[-1]) if np.size(pending) else np.zeros((0, state.shape[-1]))
    if mode == "none" or pending.shape[0] == 0:
        if mode not in ("none", "absolute", "delta"):
            raise ValueError(f"Unknown future-state mode '{mode}'; use 'none', 'absolute' or 'delta'.")
        return state.copy()
    if mode == "absolute":
        return pending[-1].astype(state.dtype)
    if mode == "delta":
        return (state + pending.sum(0)).astype(state.dtype)
    raise ValueError(f"Unknown future-state mode '{mode}'; use 'none', 'absolute' or 'delta'.")


@dataclass
class ConditionedObservation:
    """An observation with the rolled-forward state kept apart, for policies with a ``future_state`` input.

    :class:`~rslkit.deploy.onnx_policy.OnnxPolicy` takes it in place of an observation: ``obs`` feeds the
    observation inputs (as observed) and ``future_state`` the ``future_state`` input; ``offset`` (the actions rolled
    through) is checked against the policy's trained range.
    """

    obs: Any
    """The observation as observed (array ``[D]`` or ``{group: array}``)."""
    future_state: np.ndarray
    """``[S]`` state expected when the chunk starts."""
    offset: int
    """Ticks between the observation and the chunk's first action."""


class FutureStateConditioner:
    """Rolls the robot state forward through the pending actions and hands it to the policy: written into the
    observation (``output="observation"``: policies trained on plain observations) or kept apart for a
    ``future_state`` input (``output="input"``: policies trained with VLASH offsets; returns a
    :class:`ConditionedObservation`). Images and other parts of the observation stay as observed.

    Args:
        mode: see :func:`roll_forward`.
        state_index: positions of the state inside the observation vector ``[D]`` (``len == A``, the action size).
        group: observation group holding the state when observations are ``{group: array}`` mappings.
        output: ``observation`` or ``input`` (see above).
        max_offset: the largest offset (ticks) the policy was trained with; larger ones are refused by
            :meth:`check_offset` (None: no limit).
    """

    def __init__(
        self,
        mode: FutureStateMode,
        state_index: slice | list[int],
        group: str | None = None,
        *,
        output: Literal["observation", "input"] = "observation",
        max_offset: int | None = None,
    ) -> None:
        if mode not in ("none", "absolute", "delta"):
            raise ValueError(f"Unknown future-state mode '{mode}'; use 'none', 'absolute' or 'delta'.")
        if output not in ("observation", "input"):
            raise ValueError(f"Unknown output '{output}'; use 'observation' or 'input'.")
        if max_offset is not None and max_offset < 0:
            raise ValueError(f"max_offset must be >= 0 or None, got {max_offset}.")
        self.mode, self.state_index, self.group = mode, state_index, group
        self.output, self.max_offset = output, max_offset

    @classmethod
    def for_policy(
        cls, meta: PolicyMetadata, mode: FutureStateMode = "absolute", group: str | None = None
    ) -> FutureStateConditioner:
        """The conditioner of an exported chunk policy with a ``future_state`` input (slice and ``D`` from its
        metadata).

        Raises:
            ValueError: when the policy has no ``future_state`` input.
        """
        if meta.future_state_slice is None or meta.max_future_offset < 1:
            raise ValueError(
                "This policy has no future_state input; train it with --agent.policy.max_future_offset D and "
                "--agent.policy.future_state_slice START,STOP, or use FutureStateConditioner(mode, state_index)."
            )
        start, stop = meta.future_state_slice
        return cls(mode, slice(start, stop), group, output="input", max_offset=meta.max_future_offset)

    def check_offset(self, offset: int) -> None:
        """Refuse an overlap of ``offset`` ticks (inference delay) outside the trained range ``0..max_offset``.

        Raises:
            ValueError: with what to do about it.
        """
        if self.max_offset is not None and offset > self.max_offset:
            raise ValueError(
                f"The inference delay is {offset} control ticks but the policy was trained with future-state "
                f"offsets up to {self.max_offset}; its plans for longer delays are extrapolation. Retrain with "
                f"--agent.policy.max_future_offset >= {offset}, make inference faster, or lower the control rate."
            )

    def __call__(self, obs: Any, pending: np.ndarray) -> Any:
        """Copy of ``obs`` with its state replaced by the state after ``pending [n, A]`` (``output="observation"``),
        or a :class:`ConditionedObservation` (``output="input"``).

        Raises:
            ValueError: when ``n`` exceeds ``max_offset`` or the state slice does not match the action size.
        """
        offset = int(np.asarray(pending).shape[0]) if np.size(pending) else 0
        self.check_offset(offset)
        if self.output == "input":
            return ConditionedObservation(obs, self._future(self._state_source(obs), pending), offset)
        if self.mode == "none":
            return obs
        if isinstance(obs, Mapping):
            out = dict(obs)
            out[self._group()] = self(np.asarray(obs[self._group()]), pending)
            return out
        vec = np.array(obs, copy=True)
        vec[..., self.state_index] = self._future(vec, pending)
        return vec

    def _group(self) -> str:
        if self.group is None:
            raise ValueError("Observations are a mapping; pass group= to FutureStateConditioner.")
        return self.group

    def _state_source(self, obs: Any) -> np.ndarray:
        return np.asarray(obs[self._group()] if isinstance(obs, Mapping) else obs)

    def _future(self, vec: np.ndarray, pending: np.ndarray) -> np.ndarray:
        state = vec[..., self.state_index]
        if np.size(pending) and state.shape[-1] != np.asarray(pending).shape[-1]:
            raise ValueError(
                f"The state slice has {state.shape[-1]} entries but actions have {np.asarray(pending).shape[-1]}; "
                "future-state conditioning needs the state the actions command (state_index)."
            )
        return roll_forward(state, pending, self.mode)
