"""2-D point mass reaching a random goal: a minimal goal-conditioned task with success and a privileged critic."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.torch_task import TaskCfg, TorchTask


@dataclass
class PointReachCfg(TaskCfg):
    """Point-mass dynamics, goal sampling and reward weights."""

    episode_length: int = 100
    dt: float = 0.05
    mass: float = 1.0
    max_force: float = 2.0
    """Force in newtons per axis at action 1 (actions are clipped to [-1, 1])."""
    damping: float = 1.0
    """Linear velocity damping (1/s): ``v_dot = F / m - damping * v``."""
    goal_range: float = 1.0
    """Goals and start positions ~ U(-goal_range, goal_range) per axis."""
    success_radius: float = 0.05
    """Success: the point is this close to the goal when the episode ends."""
    terminate_on_success: bool = False
    """End the episode as soon as the goal is reached (else it runs to the time-out)."""
    distance_weight: float = 1.0
    action_weight: float = 0.01
    reach_weight: float = 1.0
    """Bonus per step spent within ``success_radius``."""


class PointReachTask(TorchTask):
    """Push a point mass in the plane to a goal that is resampled every episode.

    Actions ``[N, 2]`` in ``[-1, 1]`` (clipped) scale a force of ``max_force``. Dynamics (semi-implicit Euler,
    ``dt`` 0.05 s): ``v += dt (F / m - damping v)``, ``p += dt v``. Observation groups:

    - ``policy`` ``[N, 6]``: position, velocity, goal - position.
    - ``critic`` ``[N, 9]``: the policy observation, the absolute goal and the distance (privileged; the runner
      then trains an asymmetric actor-critic).

    Reward terms: ``distance`` (``-w |goal - p|``), ``action`` (``-w |a|^2``), ``reach`` (``+w`` within the success
    radius). ``extras["success"]`` flags envs within ``success_radius`` of the goal (read where episodes end).
    """

    cfg: PointReachCfg

    def __init__(self, cfg: PointReachCfg, device: str | torch.device = "cpu") -> None:
        if cfg.dt <= 0 or cfg.mass <= 0:
            raise ValueError(f"dt and mass must be positive, got dt={cfg.dt}, mass={cfg.mass}.")
        super().__init__(cfg, num_actions=2, device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pos = torch.zeros(self.num_envs, 2, device=self.device)
        self.vel = torch.zeros(self.num_envs, 2, device=self.device)
        self.goal = torch.zeros(self.num_envs, 2, device=self.device)
        self._reset_all()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"pos": self.pos, "vel": self.vel, "goal": self.goal}

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        r = self.cfg.goal_range
        n = env_ids.numel()
        self.pos[env_ids] = self.rand(n, 2, low=-r, high=r)
        self.vel[env_ids] = 0.0
        self.goal[env_ids] = self.rand(n, 2, low=-r, high=r)

    def _apply_actions(self, actions: torch.Tensor) -> None:
        c = self.cfg
        force = actions.clamp(-1.0, 1.0) * c.max_force
        self.vel += c.dt * (force / c.mass - c.damping * self.vel)
        self.pos += c.dt * self.vel

    def distance(self) -> torch.Tensor:
        """Distance to the goal ``[N]``."""
        return torch.linalg.vector_norm(self.goal - self.pos, dim=-1)

    def _observations(self) -> TensorDict:
        to_goal = self.goal - self.pos
        policy = torch.cat((self.pos, self.vel, to_goal), -1)
        critic = torch.cat((policy, self.goal, self.distance().unsqueeze(-1)), -1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        c = self.cfg
        dist = self.distance()
        return {
            "distance": -c.distance_weight * dist,
            "action": -c.action_weight * actions.clamp(-1.0, 1.0).square().sum(-1),
            "reach": c.reach_weight * (dist < c.success_radius).float(),
        }

    def _success(self) -> torch.Tensor:
        return self.distance() < self.cfg.success_radius

    def _terminated(self) -> torch.Tensor:
        if self.cfg.terminate_on_success:
            return self._success()
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)


def _make(cfg: PointReachCfg, device: str) -> PointReachTask:
    return PointReachTask(cfg, device)


TASK = TaskSpec(
    name="point-reach",
    env_cfg=lambda: PointReachCfg(num_envs=512),
    make_env=_make,
    description="2-D point mass reaching random goals (success rate, asymmetric critic)",
)
