"""The VecEnv contract shared with rsl_rl (v3+): batched, auto-resetting environments."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from tensordict import TensorDict


class VecEnv(ABC):
    """A batch of ``num_envs`` synchronized environments that reset themselves.

    Any object with these attributes and methods works with rslkit's runners, including environments
    written for rsl_rl (Isaac Lab's wrapper, mjlab); rslkit's own tasks run under rsl_rl's runner.

    Optional extensions read by rslkit when present:
        action_space: a single-env ``gymnasium.spaces`` space (``Discrete`` selects a categorical policy).
        extras["success"]: ``[N]`` bool, meaningful where ``dones`` is set, for tasks that define success.
        state_dict() / load_state_dict(): the full simulation state, stored in checkpoints for exact resume.
        request_final_obs(): afterwards ``extras["final_obs"]`` holds the observations reached before each auto-reset
        (off-policy learners bootstrap time-outs from them).
        action_names: ``[A]`` what each action drives; joint_names: the robot joints the actions command, in action
        order; observation_names: group -> ``[D]`` column names. Exported policies carry them in their metadata
        (the ROS 2 node takes its joint order from ``joint_names``).
    """

    num_envs: int
    num_actions: int
    max_episode_length: int | torch.Tensor
    episode_length_buf: torch.Tensor
    device: torch.device | str
    cfg: Any

    @abstractmethod
    def get_observations(self) -> TensorDict:
        """Return the current observations, batch ``[N]``, one entry per observation group."""

    @abstractmethod
    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Advance every env by one step.

        Args:
            actions: ``[N, A]``.

        Returns:
            ``(obs, rewards [N], dones [N], extras)`` with ``extras["time_outs"]`` ``[N]`` (truncations, also in
            ``dones``) and ``extras["log"]`` (scalars to average over an iteration).
        """


def control_period(env: Any) -> float | None:
    """Simulated seconds per ``env.step`` (the control period), or None when the env does not say.

    Read from the env's ``step_dt`` (MuJoCo tasks, the render hook) or its config's ``dt`` (torch tasks).
    """
    for value in (getattr(env, "step_dt", None), getattr(getattr(env, "cfg", None), "dt", None)):
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None
