"""Batched Gymnasium CartPole-v1: same dynamics, termination, reward and episode length, discrete or continuous force.

Continuous control needs a continuous policy distribution, which the default agent config cannot pick from the env
config: train it with ``--env.action_type continuous --agent.policy.distribution gaussian`` (the runner refuses a
categorical policy on the continuous action space and says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.torch_task import TaskCfg, TorchTask


@dataclass
class CartpoleCfg(TaskCfg):
    """CartPole-v1 constants (``gymnasium/envs/classic_control/cartpole.py``)."""

    episode_length: int = 500
    action_type: Literal["discrete", "continuous"] = "discrete"
    """``discrete``: Discrete(2), 0 pushes left, 1 pushes right (needs ``agent.policy.distribution categorical``).
    ``continuous``: Box(-1, 1, (1,)), force ``clip(a, -1, 1) * force_mag`` (needs e.g. ``gaussian``)."""
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    """Half the pole's length."""
    force_mag: float = 10.0
    tau: float = 0.02
    """Seconds per step (explicit Euler, as Gymnasium's default ``kinematics_integrator``)."""
    x_threshold: float = 2.4
    theta_threshold: float = 12 * 2 * math.pi / 360
    """Termination angle in radians (12 degrees, 0.2095)."""
    reset_noise: float = 0.05
    """Initial state ~ U(-reset_noise, reset_noise) per component."""


class CartPoleParams(Protocol):
    """Physical constants of a cart-pole (any config with these fields)."""

    gravity: float
    masscart: float
    masspole: float
    length: float


def cartpole_derivatives(
    force: torch.Tensor, theta: torch.Tensor, theta_dot: torch.Tensor, cfg: CartPoleParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """Frictionless cart-pole accelerations ``(x_acc, theta_acc)``, each ``[N]``, Gymnasium's equations.

    Valid for any pole angle (``theta = 0`` upright, ``pi`` hanging down); ``force [N]`` in newtons.
    """
    total_mass = cfg.masscart + cfg.masspole
    polemass_length = cfg.masspole * cfg.length
    cos, sin = torch.cos(theta), torch.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
    theta_acc = (cfg.gravity * sin - cos * temp) / (cfg.length * (4.0 / 3.0 - cfg.masspole * cos**2 / total_mass))
    x_acc = temp - polemass_length * theta_acc * cos / total_mass
    return x_acc, theta_acc


class CartpoleTask(TorchTask):
    """Balance a pole on a cart; +1 reward per step (logged as ``alive``), including the terminating one.

    State ``[x, x_dot, theta, theta_dot]`` is the observation group ``policy``. Episodes terminate when
    ``|x| > 2.4`` or ``|theta| > 0.2095`` and time out after 500 steps.
    """

    cfg: CartpoleCfg

    def __init__(self, cfg: CartpoleCfg, device: str | torch.device = "cpu") -> None:
        if cfg.action_type not in ("discrete", "continuous"):
            raise ValueError(f"action_type must be 'discrete' or 'continuous', got {cfg.action_type!r}.")
        super().__init__(cfg, num_actions=1, device=device)
        if cfg.action_type == "discrete":
            self.action_space = gym.spaces.Discrete(2)
        else:
            self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.state = torch.zeros(self.num_envs, 4, device=self.device)
        """``[N, 4]``: x, x_dot, theta, theta_dot."""
        self._reset_all()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"state": self.state}

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        noise = self.cfg.reset_noise
        self.state[env_ids] = self.rand(env_ids.numel(), 4, low=-noise, high=noise)

    def force(self, actions: torch.Tensor) -> torch.Tensor:
        """Force ``[N]`` in newtons from env actions ``[N, 1]`` (an index for discrete, in [-1, 1] for continuous).

        Raises:
            ValueError: for discrete actions other than 0 or 1 (when ``check_actions`` is on).
        """
        c = self.cfg
        a = actions[:, 0]
        if c.action_type == "continuous":
            return a.clamp(-1.0, 1.0) * c.force_mag
        if c.check_actions:
            bad = (a != 0) & (a != 1)
            if bool(bad.any()):
                ids = bad.nonzero().squeeze(-1).tolist()
                raise ValueError(
                    f"Discrete cartpole actions must be 0 (left) or 1 (right); env indices {ids[:20]} got other "
                    "values. Use a categorical policy, or --env.action_type continuous for forces in [-1, 1]."
                )
        return torch.where(a > 0.5, c.force_mag, -c.force_mag)

    def _apply_actions(self, actions: torch.Tensor) -> None:
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        x_acc, theta_acc = cartpole_derivatives(self.force(actions), theta, theta_dot, self.cfg)
        tau = self.cfg.tau
        # Explicit Euler: positions advance with the old velocities.
        new = (x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc)
        self.state.copy_(torch.stack(new, -1))

    def _observations(self) -> TensorDict:
        return TensorDict({"policy": self.state.clone()}, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"alive": torch.ones(self.num_envs, device=self.device)}

    @property
    def step_dt(self) -> float:
        """Simulated seconds per ``step`` (Gymnasium's ``tau``)."""
        return self.cfg.tau

    def _terminated(self) -> torch.Tensor:
        x, theta = self.state[:, 0], self.state[:, 2]
        return (x.abs() > self.cfg.x_threshold) | (theta.abs() > self.cfg.theta_threshold)


def _make(cfg: CartpoleCfg, device: str) -> CartpoleTask:
    return CartpoleTask(cfg, device)


TASK = TaskSpec(
    name="cartpole",
    env_cfg=lambda: CartpoleCfg(num_envs=256),
    make_env=_make,
    description="Gymnasium CartPole-v1 balance, batched in torch (discrete; --env.action_type continuous)",
)
