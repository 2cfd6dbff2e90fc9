"""A tiny VecEnv with a camera, for the recorder and ``rslkit.record --camera`` (MuJoCo tasks get real cameras
elsewhere; this one's pictures encode the state so a test can check every frame sits beside its observation)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv


class CameraEnv(VecEnv):
    """``N`` envs counting steps; observation ``policy = [step, env]``, camera ``front`` (group ``camera_front``):
    ``[N, H, W, 3]`` uint8 whose red channel is ``10 * step``, green ``20 * env``, blue a horizontal ramp."""

    def __init__(self, num_envs: int = 2, episode_length: int = 4, height: int = 16, width: int = 24):
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 1, episode_length
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.device, self.cfg, self.height, self.width = "cpu", None, height, width

    def _camera(self) -> torch.Tensor:
        image = torch.zeros(self.num_envs, self.height, self.width, 3, dtype=torch.uint8)
        image[..., 0] = (10 * self.episode_length_buf).to(torch.uint8).view(-1, 1, 1)
        image[..., 1] = (20 * torch.arange(self.num_envs)).to(torch.uint8).view(-1, 1, 1)
        image[..., 2] = (torch.arange(self.width) * 8).to(torch.uint8)
        return image

    def get_observations(self) -> TensorDict:
        policy = torch.stack([self.episode_length_buf.float(), torch.arange(self.num_envs).float()], -1)
        return TensorDict({"policy": policy, "camera_front": self._camera()}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        self.episode_length_buf += 1
        dones = self.episode_length_buf >= self.max_episode_length
        self.episode_length_buf[dones] = 0
        rewards = actions[:, 0].float()
        return self.get_observations(), rewards, dones, {"time_outs": dones.clone(), "log": {}}


@pytest.fixture
def camera_env() -> type[CameraEnv]:
    """The :class:`CameraEnv` class (tests build it with their own sizes)."""
    return CameraEnv
