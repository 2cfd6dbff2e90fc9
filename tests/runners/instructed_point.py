"""A tiny language-conditioned VecEnv with a camera, for the VLA runner: move a point to the target the
instruction names (left or right); the camera shows the point."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv

INSTRUCTIONS = ["move the point to the left target", "move the point to the right target"]
TARGETS = torch.tensor([[-0.5, 0.0], [0.5, 0.0]])


class InstructedPointEnv(VecEnv):
    """``N`` points on a plane; ``policy = position [N, 2]``, ``goal [N]`` (instruction index), ``camera_front``
    ``[N, 16, 16, 3]`` uint8 (a white dot at the point). Actions ``[N, 2]`` move it by ``0.1 * clip(a, -1, 1)``.
    Episodes last 10 steps; success: within 0.15 of the instructed target at the end."""

    instructions = INSTRUCTIONS

    def __init__(self, num_envs: int = 8, seed: int = 0) -> None:
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 2, 10
        self.device, self.cfg = "cpu", None
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.generator = torch.Generator().manual_seed(seed)
        self.pos = torch.zeros(num_envs, 2)
        self.goal = torch.zeros(num_envs, dtype=torch.long)
        self._reset(torch.arange(num_envs))

    def _reset(self, ids: torch.Tensor) -> None:
        self.pos[ids] = (torch.rand(len(ids), 2, generator=self.generator) - 0.5) * 0.2
        self.goal[ids] = torch.randint(0, 2, (len(ids),), generator=self.generator)
        self.episode_length_buf[ids] = 0

    def reset(self) -> None:
        self._reset(torch.arange(self.num_envs))

    def _camera(self) -> torch.Tensor:
        image = torch.zeros(self.num_envs, 16, 16, 3, dtype=torch.uint8)
        px = ((self.pos + 1) * 7.5).round().long().clamp(0, 15)
        image[torch.arange(self.num_envs), px[:, 1], px[:, 0]] = 255
        return image

    def get_observations(self) -> TensorDict:
        groups = {"policy": self.pos.clone(), "goal": self.goal.clone(), "camera_front": self._camera()}
        return TensorDict(groups, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        self.pos += 0.1 * actions.clamp(-1, 1)
        self.episode_length_buf += 1
        dist = torch.linalg.vector_norm(self.pos - TARGETS[self.goal], dim=-1)
        dones = self.episode_length_buf >= self.max_episode_length
        extras = {"time_outs": dones.clone(), "success": dones & (dist < 0.15), "log": {}}
        self._reset(dones.nonzero().flatten())
        return self.get_observations(), -dist, dones, extras


def expert(obs: TensorDict) -> torch.Tensor:
    """Straight to the instructed target at full speed."""
    return ((TARGETS[obs["goal"]] - obs["policy"]) / 0.1).clamp(-1, 1)
