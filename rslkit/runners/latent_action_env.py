"""The env of noise-space RL (DSRL): its action is the initial noise of a frozen flow chunk policy.

Wagenmaker et al. 2025 ("Steering your diffusion policy with latent space RL") keep a pretrained flow / diffusion
policy frozen and let an RL agent choose the noise its sampler starts from (the *latent action*); the policy turns
that noise into the executed chunk. :class:`LatentActionEnv` makes that an ordinary continuous-action env, so SAC
and the off-policy runner train it unchanged: ``step(w)`` takes ``w in [-1, 1]^(Ta A)`` (SAC's tanh-squashed
action), starts the frozen deterministic sampler from ``x0 = latent_scale * w`` and runs the chunk it returns through
an :class:`~rslkit.envs.action_chunk.ActionChunkWrapper` (one transition per chunk, the reward the discounted sum of
the chunk's rewards; an episode that ends inside a chunk ends the transition). No gradient flows into the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.action_chunk import ActionChunkWrapper
from rslkit.envs.vec_env import VecEnv

ChunkSampler = Callable[[TensorDict, torch.Tensor], torch.Tensor]
"""``(observation batch [N], initial noise x0 [N, Ta, A]) -> env-unit chunk [N, Ta, A]``: a frozen flow policy's
deterministic sampler (the ODE from ``x0``)."""


class LatentActionEnv(VecEnv):
    """A VecEnv whose action is a frozen flow policy's initial noise (DSRL's latent action).

    Args:
        chunk_env: the chunked env the policy's chunks run in (its horizon is the policy's ``Ta``).
        sampler: the frozen policy's deterministic sampler (:data:`ChunkSampler`).
        latent_scale: ``x0 = latent_scale * w`` for the action ``w in [-1, 1]``: the largest initial noise the
            agent can choose per entry.

    Raises:
        ValueError: for a latent scale that is not a positive finite number.
    """

    def __init__(self, chunk_env: ActionChunkWrapper, sampler: ChunkSampler, latent_scale: float) -> None:
        if not (np.isfinite(latent_scale) and latent_scale > 0):
            raise ValueError(f"The latent scale must be a finite number > 0, got {latent_scale}.")
        self.chunk_env = chunk_env
        self.sampler = sampler
        self.latent_scale = latent_scale
        self.horizon, self.chunk_action_dim = chunk_env.horizon, chunk_env.num_actions
        self.num_envs = chunk_env.num_envs
        self.num_actions = self.horizon * self.chunk_action_dim
        self.device = chunk_env.device
        self.cfg = chunk_env.cfg
        self.max_episode_length = chunk_env.max_episode_length
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), dtype=np.float32)
        self._obs: TensorDict | None = None
        """The observation the next latent action is chosen at (the last one returned)."""

    @property
    def episode_length_buf(self) -> torch.Tensor:  # type: ignore[override]
        """Episode lengths of the wrapped env, in env steps."""
        return self.chunk_env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.chunk_env.episode_length_buf = value

    def get_observations(self) -> TensorDict:
        """Observations of the wrapped env (remembered: the next :meth:`step` samples the chunk at them)."""
        self._obs = self.chunk_env.get_observations()
        return self._obs

    def initial_noise(self, latent: torch.Tensor) -> torch.Tensor:
        """``x0 = latent_scale * w``: latent actions ``[N, Ta A]`` -> initial noise ``[N, Ta, A]``."""
        return self.latent_scale * latent.reshape(latent.shape[0], self.horizon, self.chunk_action_dim)

    @torch.no_grad()
    def chunk(self, obs: TensorDict, latent: torch.Tensor) -> torch.Tensor:
        """The env-unit chunk ``[N, Ta, A]`` the frozen policy makes of ``latent`` at ``obs`` (no gradient)."""
        return self.sampler(obs, self.initial_noise(latent.to(self.device)))

    def step(self, latent: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Sample the chunk of ``latent [N, Ta A]`` at the current observation and run it (see
        :meth:`ActionChunkWrapper.step` for the rewards, dones and extras)."""
        obs = self._obs if self._obs is not None else self.get_observations()
        out = self.chunk_env.step(self.chunk(obs, latent))
        self._obs = out[0]
        return out

    def state_dict(self) -> dict:
        """State of the wrapped env."""
        return self.chunk_env.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore the wrapped env's state (the next step reads its observation afresh)."""
        self.chunk_env.load_state_dict(state)
        self._obs = None
