"""VLASH future-state conditioning: roll the robot state forward through the actions that run during inference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

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


class FutureStateConditioner:
    """Writes the rolled-forward state into the observation the policy sees (images and other parts unchanged).

    Args:
        mode: see :func:`roll_forward`.
        state_index: positions of the state inside the observation vector ``[D]`` (``len == A``, the action size).
        group: observation group holding the state when observations are ``{group: array}`` mappings.
    """

    def __init__(self, mode: FutureStateMode, state_index: slice | list[int], group: str | None = None) -> None:
        if mode not in ("none", "absolute", "delta"):
            raise ValueError(f"Unknown future-state mode '{mode}'; use 'none', 'absolute' or 'delta'.")
        self.mode, self.state_index, self.group = mode, state_index, group

    def __call__(self, obs: Any, pending: np.ndarray) -> Any:
        """Copy of ``obs`` with its state replaced by the state after ``pending [n, A]``."""
        if self.mode == "none":
            return obs
        if isinstance(obs, Mapping):
            if self.group is None:
                raise ValueError("Observations are a mapping; pass group= to FutureStateConditioner.")
            out = dict(obs)
            out[self.group] = self(np.asarray(obs[self.group]), pending)
            return out
        vec = np.array(obs, copy=True)
        state = vec[..., self.state_index]
        if np.size(pending) and state.shape[-1] != np.asarray(pending).shape[-1]:
            raise ValueError(
                f"The state slice has {state.shape[-1]} entries but actions have {np.asarray(pending).shape[-1]}; "
                "future-state conditioning needs the state the actions command (state_index)."
            )
        vec[..., self.state_index] = roll_forward(state, pending, self.mode)
        return vec
