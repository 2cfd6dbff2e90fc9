"""Batched Gymnasium Pendulum-v1: same dynamics, reward and episode length, so returns compare with its tables.

Its scripted expert (:func:`pendulum_expert`: energy pumping, then a PD balance) makes deliberately imperfect
demonstrations (with action noise) for behaviour cloning without training an RL policy first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.columns import Columns
from rslkit.envs.expert import Observation
from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.torch_task import TaskCfg, TorchTask


@dataclass
class PendulumCfg(TaskCfg):
    """Pendulum-v1 constants (``gymnasium/envs/classic_control/pendulum.py``)."""

    episode_length: int = 200
    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    length: float = 1.0


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Wrap angles to ``[-pi, pi)``."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class PendulumTask(TorchTask):
    """Swing a pendulum up and hold it.

    Actions are normalized to ``[-1, 1]`` and scaled to ``[-max_torque, max_torque]`` (then clipped, as
    Gymnasium does), so bounded policies and Gymnasium's action space agree. Observation group ``policy``:
    ``[cos th, sin th, th_dot]``. Reward ``-(th^2 + 0.1 th_dot^2 + 0.001 u^2)``, logged per term.
    """

    cfg: PendulumCfg

    def __init__(self, cfg: PendulumCfg, device: str | torch.device = "cpu") -> None:
        super().__init__(cfg, num_actions=1, device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.th = torch.zeros(self.num_envs, device=self.device)
        self.th_dot = torch.zeros(self.num_envs, device=self.device)
        self._prev_th = self.th.clone()
        self._prev_th_dot = self.th_dot.clone()
        self._u = self.th.clone()
        self._reset_all()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"th": self.th, "th_dot": self.th_dot}

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        n = env_ids.numel()
        self.th[env_ids] = self.rand(n, low=-math.pi, high=math.pi)
        self.th_dot[env_ids] = self.rand(n, low=-1.0, high=1.0)

    def _pre_step(self) -> None:
        # Pendulum-v1 computes the cost from the state before the step.
        self._prev_th.copy_(self.th)
        self._prev_th_dot.copy_(self.th_dot)

    def _apply_actions(self, actions: torch.Tensor) -> None:
        c = self.cfg
        u = (actions[:, 0] * c.max_torque).clamp(-c.max_torque, c.max_torque)
        self._u = u
        th_dot = self.th_dot + (3 * c.g / (2 * c.length) * torch.sin(self.th) + 3.0 / (c.m * c.length**2) * u) * c.dt
        self.th_dot = th_dot.clamp(-c.max_speed, c.max_speed)
        self.th = self.th + self.th_dot * c.dt

    action_names = ["torque_normalized"]
    observation_names = {"policy": ["cos_theta", "sin_theta", "theta_dot"]}

    def _observations(self) -> TensorDict:
        obs = torch.stack((torch.cos(self.th), torch.sin(self.th), self.th_dot), dim=-1)
        return TensorDict({"policy": obs}, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "angle": -(angle_normalize(self._prev_th) ** 2),
            "velocity": -0.1 * self._prev_th_dot**2,
            "torque": -0.001 * self._u**2,
        }

    def _terminated(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)


POLICY = Columns(PendulumTask.observation_names["policy"])
"""The ``policy`` group's columns by name."""
COS, SIN, THETA_DOT = (POLICY.one(name) for name in ("cos_theta", "sin_theta", "theta_dot"))


def pendulum_expert(
    obs: TensorDict | torch.Tensor,
    gravity_term: float = 15.0,
    torque_gain: float = 6.0,
    energy_gain: float = 1.0,
    balance_angle: float = 0.5,
    kp: float = 60.0,
    kd: float = 12.0,
) -> torch.Tensor:
    """Normalized torques ``[N, 1]`` in ``[-1, 1]`` for pendulum observations ``[N, 3]`` (``cos_theta``,
    ``sin_theta``, ``theta_dot``).

    With ``th = 0`` upright, Pendulum-v1 has ``th_ddot = 15 sin th + 6 a`` (``g = 10``, ``l = m = 1``, torque
    ``2 a``). The energy ``E = th_dot^2 / 2 + 15 cos th`` changes as ``dE/dt = 6 a th_dot``, so far from the top
    ``a = clip(k_E (E* - E) th_dot)`` pumps energy to the upright value ``E* = 15``; within ``balance_angle`` of the
    top a PD law with gravity compensation holds it up.

    Args:
        obs: an observation TensorDict (group ``policy``) or the ``[N, 3]`` tensor itself.
    """
    x = obs["policy"] if isinstance(obs, TensorDict) else obs
    cos_th, sin_th, th_dot = x[:, COS], x[:, SIN], x[:, THETA_DOT]
    th = torch.atan2(sin_th, cos_th)
    energy = 0.5 * th_dot**2 + gravity_term * cos_th
    swing = energy_gain * (gravity_term - energy) * th_dot
    balance = (-kp * th - kd * th_dot - gravity_term * sin_th) / torque_gain
    action = torch.where(th.abs() < balance_angle, balance, swing)
    return action.clamp(-1.0, 1.0).unsqueeze(-1)


def numpy_expert(obs: Observation) -> np.ndarray:
    """:func:`pendulum_expert` on numpy observation groups ``{"policy": [..., 3]}`` (the task's ``expert``)."""
    x = np.asarray(obs["policy"], dtype=np.float32)
    POLICY.check(x.shape[-1], "The pendulum expert")
    action = pendulum_expert(torch.from_numpy(x.reshape(-1, x.shape[-1]))).numpy()
    return action.reshape(*x.shape[:-1], 1)


def upright_distance(obs: Observation) -> float:
    """The pole's angle beyond 0.1 rad from upright (rad): the task's success test on one observation."""
    x = np.asarray(obs["policy"])
    return max(abs(math.atan2(float(x[SIN]), float(x[COS]))) - 0.1, 0.0)


def _make(cfg: PendulumCfg, device: str) -> PendulumTask:
    return PendulumTask(cfg, device)


TASK = TaskSpec(
    name="pendulum",
    env_cfg=lambda: PendulumCfg(num_envs=1024),
    make_env=_make,
    description="Gymnasium Pendulum-v1 swing-up, batched in torch",
    expert=lambda cfg: numpy_expert,
    goal_distance=lambda cfg: upright_distance,
)
