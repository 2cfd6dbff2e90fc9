"""A task of your own, trained without editing rslkit (docs/custom_tasks.md).

From the repository root::

    .venv/bin/python train.py --task examples.my_tasks:slider --max_iterations 30
    .venv/bin/python play.py --checkpoint logs/examples.my_tasks_slider/<run>

``--task package.module:attribute`` imports the module and takes the attribute, a :class:`~rslkit.envs.TaskSpec`.
The module's ``RECIPES`` dict gives the agent configs (here PPO's and SAC's); without one, an algorithm trains with
its default config. A package of your own can instead register names (``--task slider``) through the
``rslkit.tasks`` entry-point group.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.algorithms.ppo import PPOCfg
from rslkit.envs import TaskCfg, TaskSpec, TorchTask
from rslkit.models.actor_critic import PolicyCfg
from rslkit.recipes.sac_defaults import small_task_sac_cfg
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.validation import expect


@dataclass
class SliderCfg(TaskCfg):
    """A mass on a rail pushed to a random target. CLI: ``--env.<field>``."""

    num_envs: int = 256
    episode_length: int = 100
    dt: float = 0.05
    """Seconds per control step (export writes 1 / dt as the policy's control rate)."""
    max_force: float = 2.0

    def check(self) -> None:
        """Fields the dynamics need positive."""
        super().check()
        expect(self.dt > 0, "dt", f"must be > 0, got {self.dt}")
        expect(self.max_force > 0, "max_force", f"must be > 0, got {self.max_force}")


class SliderTask(TorchTask):
    """State: position ``x``, velocity ``v``, target ``g`` (all ``[N]``); action: a force in ``[-1, 1]``.

    Observation ``policy`` ``[N, 3]``: ``(x, v, g - x)``. Reward terms: ``distance`` ``-|g - x|``, ``effort``
    ``-0.01 a^2``. Success: within 5 cm of the target when the episode ends.
    """

    cfg: SliderCfg

    def __init__(self, cfg: SliderCfg, device: str | torch.device = "cpu") -> None:
        super().__init__(cfg, num_actions=1, device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.x, self.v, self.g = (torch.zeros(self.num_envs, device=self.device) for _ in range(3))
        self._reset_all()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "v": self.v, "g": self.g}  # saved in checkpoints: resume is exact

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        n = env_ids.numel()
        self.x[env_ids], self.v[env_ids] = self.rand(n, low=-1.0, high=1.0), 0.0
        self.g[env_ids] = self.rand(n, low=-1.0, high=1.0)

    def _apply_actions(self, actions: torch.Tensor) -> None:
        self.v += self.cfg.dt * (actions[:, 0].clamp(-1.0, 1.0) * self.cfg.max_force - self.v)
        self.x += self.cfg.dt * self.v
        self._effort = actions[:, 0].clamp(-1.0, 1.0) ** 2

    def _observations(self) -> TensorDict:
        obs = torch.stack((self.x, self.v, self.g - self.x), dim=-1)
        return TensorDict({"policy": obs}, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"distance": -(self.g - self.x).abs(), "effort": -0.01 * self._effort}

    def _terminated(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _success(self) -> torch.Tensor:
        return (self.g - self.x).abs() < 0.05


slider = TaskSpec(
    name="slider",
    env_cfg=SliderCfg,
    make_env=lambda cfg, device: SliderTask(cfg, device),
    description="A mass on a rail pushed to a random target (examples/my_tasks)",
)


def slider_ppo_cfg() -> PPORunnerCfg:
    """PPO for the slider: small networks, 32-step rollouts."""
    return PPORunnerCfg(
        algorithm=PPOCfg(gamma=0.95, learning_rate=1e-3, entropy_coef=0.0, num_mini_batches=4),
        policy=PolicyCfg(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), init_std=0.5),
        num_steps_per_env=32,
        max_iterations=30,
        save_interval=10,
    )


RECIPES = {"ppo": slider_ppo_cfg, "sac": small_task_sac_cfg}
"""Algorithm name -> agent config of the tasks in this module."""
