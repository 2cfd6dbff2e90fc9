"""Cart-pole swing-up: the pole starts hanging down; a smooth dm_control-style reward for holding it up, centered."""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.tasks.cartpole import cartpole_derivatives
from rslkit.envs.torch_task import TaskCfg, TorchTask


@dataclass
class CartpoleSwingupCfg(TaskCfg):
    """Gymnasium CartPole-v1 physics with a continuous force; dm_control ``cartpole.swingup`` reward."""

    episode_length: int = 500
    """500 control steps of ``sim_dt * decimation = 0.02`` s: 10 s, dm_control's time limit."""
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    """Half the pole's length."""
    force_mag: float = 10.0
    """Force in newtons at action 1 (actions are clipped to [-1, 1])."""
    sim_dt: float = 0.01
    decimation: int = 2
    """Physics substeps (semi-implicit Euler, stable through fast rotations) per control step."""
    x_threshold: float = 2.4
    """Track half-length: walls at ``+-x_threshold`` stop the cart (inelastic), no termination."""
    wall_weight: float = 0.1
    """Penalty per step spent against a wall (logged as ``wall``), on top of the ``centered`` factor."""
    reset_noise: float = 0.05
    """Initial ``x, x_dot, theta - pi, theta_dot`` ~ U(-reset_noise, reset_noise)."""
    centered_margin: float = 2.0
    control_margin: float = 1.0
    velocity_margin: float = 5.0


def wrap_angle(theta: torch.Tensor) -> torch.Tensor:
    """Angles wrapped to ``[-pi, pi)``, same shape."""
    return torch.remainder(theta + math.pi, 2 * math.pi) - math.pi


def tolerance_gaussian(x: torch.Tensor, margin: float, value_at_margin: float = 0.1) -> torch.Tensor:
    """dm_control ``rewards.tolerance(x, bounds=(0, 0), margin, sigmoid='gaussian')``: 1 at 0, ``value_at_margin``
    at ``|x| = margin``; same shape as ``x``."""
    return value_at_margin ** ((x / margin) ** 2)


def tolerance_quadratic(x: torch.Tensor, margin: float) -> torch.Tensor:
    """dm_control ``rewards.tolerance(x, margin, sigmoid='quadratic', value_at_margin=0)``: ``1 - (x/margin)^2``
    clipped at 0; same shape as ``x``."""
    return (1.0 - (x / margin) ** 2).clamp_min(0.0)


class CartpoleSwingupTask(TorchTask):
    """Swing the pole up from hanging down and balance it, keeping the cart near the center.

    Actions ``[N, 1]`` in ``[-1, 1]`` (clipped) scale a force of ``force_mag`` newtons. Observation group ``policy``:
    ``[x, x_dot, cos theta, sin theta, theta_dot]`` (``theta = 0`` upright). Episodes never terminate; they time
    out after 500 steps (10 s). The track ends in walls at ``|x| = 2.4`` that stop the cart inelastically (the pole
    takes the matching impulse); each step at a wall costs ``wall_weight``. Terminating at the track end instead was
    tried and rejected: PPO then learns to rush off the track for one quick partial swing (episodes of ~40 steps).

    Reward, as in dm_control: ``upright * centered * small_control * small_velocity`` in ``[0, 1]`` with
    ``upright = (cos theta + 1) / 2``, ``centered = (1 + tol(x, 2)) / 2``, ``small_control = (4 + tolq(u, 1)) / 5``,
    ``small_velocity = (1 + tol(theta_dot, 5)) / 2``. It is logged as a telescoping sum whose terms add up to
    the product: ``upright``, then for each further factor the reward it takes away (``<= 0``), e.g.
    ``centered = upright * (centered_factor - 1)``.
    """

    cfg: CartpoleSwingupCfg

    def __init__(self, cfg: CartpoleSwingupCfg, device: str | torch.device = "cpu") -> None:
        if cfg.decimation < 1:
            raise ValueError(f"decimation must be >= 1, got {cfg.decimation}.")
        super().__init__(cfg, num_actions=1, device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.state = torch.zeros(self.num_envs, 4, device=self.device)
        """``[N, 4]``: x, x_dot, theta, theta_dot."""
        self._reset_all()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"state": self.state}

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        noise = self.cfg.reset_noise
        state = self.rand(env_ids.numel(), 4, low=-noise, high=noise)
        state[:, 2] = wrap_angle(state[:, 2] + math.pi)
        self.state[env_ids] = state

    def _apply_actions(self, actions: torch.Tensor) -> None:
        c = self.cfg
        force = actions[:, 0].clamp(-1.0, 1.0) * c.force_mag
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        for _ in range(c.decimation):
            x_acc, theta_acc = cartpole_derivatives(force, theta, theta_dot, c)
            x_dot = x_dot + c.sim_dt * x_acc
            theta_dot = theta_dot + c.sim_dt * theta_acc
            x = x + c.sim_dt * x_dot
            theta = theta + c.sim_dt * theta_dot
            x, x_dot, theta_dot = self._wall_collision(x, x_dot, theta, theta_dot)
        # Keep theta bounded over long spins; observations use cos/sin, so this changes nothing else.
        theta = wrap_angle(theta)
        self.state.copy_(torch.stack((x, x_dot, theta, theta_dot), -1))

    def _wall_collision(
        self, x: torch.Tensor, x_dot: torch.Tensor, theta: torch.Tensor, theta_dot: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Stop carts past a wall: ``x`` clamped, ``x_dot -> 0``, and the pole takes the impulse exactly.

        From the pole's equation ``(4/3) l theta_acc = g sin(theta) - x_acc cos(theta)``, an impulsive change
        ``dx_dot`` changes ``theta_dot`` by ``-3 cos(theta) dx_dot / (4 l)``. All tensors ``[N]``.
        """
        limit = self.cfg.x_threshold
        hit = (x.abs() > limit) & (x * x_dot > 0)
        dx_dot = torch.where(hit, -x_dot, torch.zeros_like(x_dot))
        theta_dot = theta_dot - 3.0 * torch.cos(theta) * dx_dot / (4.0 * self.cfg.length)
        return x.clamp(-limit, limit), x_dot + dx_dot, theta_dot

    def _observations(self) -> TensorDict:
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        obs = torch.stack((x, x_dot, torch.cos(theta), torch.sin(theta), theta_dot), -1)
        return TensorDict({"policy": obs}, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        c = self.cfg
        x, theta, theta_dot = self.state[:, 0], self.state[:, 2], self.state[:, 3]
        upright = (torch.cos(theta) + 1.0) / 2.0
        centered = (1.0 + tolerance_gaussian(x, c.centered_margin)) / 2.0
        small_control = (4.0 + tolerance_quadratic(actions[:, 0].clamp(-1.0, 1.0), c.control_margin)) / 5.0
        small_velocity = (1.0 + tolerance_gaussian(theta_dot, c.velocity_margin)) / 2.0
        r1 = upright
        r2 = r1 * centered
        r3 = r2 * small_control
        r4 = r3 * small_velocity
        at_wall = (x.abs() >= c.x_threshold).float()
        return {
            "upright": r1,
            "centered": r2 - r1,
            "small_control": r3 - r2,
            "small_velocity": r4 - r3,
            "wall": -c.wall_weight * at_wall,
        }

    @property
    def step_dt(self) -> float:
        """Simulated seconds per ``step``: ``sim_dt * decimation``."""
        return self.cfg.sim_dt * self.cfg.decimation

    def _terminated(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)


def _make(cfg: CartpoleSwingupCfg, device: str) -> CartpoleSwingupTask:
    return CartpoleSwingupTask(cfg, device)


TASK = TaskSpec(
    name="cartpole-swingup",
    env_cfg=lambda: CartpoleSwingupCfg(num_envs=256),
    make_env=_make,
    description="Cart-pole swing-up from hanging down, dm_control-style smooth reward",
)
