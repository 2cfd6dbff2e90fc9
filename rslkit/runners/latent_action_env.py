"""The env of noise-space RL (DSRL): its action is the initial noise of a frozen flow chunk policy.

Wagenmaker et al. 2025 ("Steering your diffusion policy with latent space RL") keep a pretrained flow / diffusion
policy frozen and let an RL agent choose the noise its sampler starts from (the *latent action*); the policy turns
that noise into the executed chunk. :class:`LatentActionEnv` makes that an ordinary continuous-action env, so SAC
and the off-policy runner train it unchanged: ``step(w)`` takes ``w in [-1, 1]^(Ta A)`` (SAC's tanh-squashed
action), starts the frozen deterministic sampler from ``x0 = latent_scale * w`` and runs the chunk it returns as an
:class:`~rslkit.envs.action_chunk.ActionChunkWrapper` does (one transition per chunk, the reward the discounted sum
of the chunk's rewards; an episode that ends inside a chunk ends the transition). No gradient flows into the policy.
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


class LatentActionEnv(ActionChunkWrapper):
    """A chunked env whose action is a frozen flow policy's initial noise (DSRL's latent action).

    Args:
        env: the per-step environment.
        horizon: ``Ta``, the policy's chunk size.
        gamma: per-step discount inside a chunk.
        restart_ended: see :class:`~rslkit.envs.action_chunk.ActionChunkWrapper`.
        sampler: the frozen policy's deterministic sampler (:data:`ChunkSampler`).
        latent_scale: ``x0 = latent_scale * w`` for the action ``w in [-1, 1]``: the largest initial noise the
            agent can choose per entry.

    Raises:
        ValueError: for a latent scale that is not a positive finite number (and see ``ActionChunkWrapper``).
    """

    def __init__(
        self,
        env: VecEnv,
        horizon: int,
        gamma: float,
        restart_ended: bool,
        sampler: ChunkSampler,
        latent_scale: float,
    ) -> None:
        if not (np.isfinite(latent_scale) and latent_scale > 0):
            raise ValueError(f"The latent scale must be a finite number > 0, got {latent_scale}.")
        super().__init__(env, horizon, gamma, restart_ended)
        self.sampler = sampler
        self.latent_scale = latent_scale
        self.chunk_action_dim = env.num_actions
        self.num_actions = horizon * env.num_actions
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), dtype=np.float32)
        self._obs: TensorDict | None = None
        """The observation the next latent action is chosen at (the last one returned)."""

    def get_observations(self) -> TensorDict:
        """Observations of the wrapped env (remembered: the next :meth:`step` samples the chunk at them)."""
        self._obs = super().get_observations()
        return self._obs

    def initial_noise(self, latent: torch.Tensor) -> torch.Tensor:
        """``x0 = latent_scale * w``: latent actions ``[N, Ta A]`` -> initial noise ``[N, Ta, A]``."""
        return self.latent_scale * latent.reshape(latent.shape[0], self.horizon, self.chunk_action_dim)

    @torch.no_grad()
    def chunk(self, obs: TensorDict, latent: torch.Tensor) -> torch.Tensor:
        """The env-unit chunk ``[N, Ta, A]`` the frozen policy makes of ``latent`` at ``obs`` (no gradient)."""
        return self.sampler(obs, self.initial_noise(latent.to(self.device)))

    def _check_chunk(self, chunk: torch.Tensor) -> torch.Tensor:
        """The sampler's chunk must be ``[N, Ta, A]`` (this env's own actions are the ``[N, Ta A]`` latents).

        Raises:
            ValueError: for a chunk of another shape.
        """
        want = (self.num_envs, self.horizon, self.chunk_action_dim)
        if tuple(chunk.shape) != want:
            raise ValueError(
                f"The frozen policy's sampler returned a chunk of shape {list(chunk.shape)}, not {list(want)}."
            )
        return chunk

    def step(self, latent: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Sample the chunk of ``latent [N, Ta A]`` at the current observation and run it (see
        :meth:`ActionChunkWrapper.step` for the rewards, dones and extras)."""
        if tuple(latent.shape) != (self.num_envs, self.num_actions):
            raise ValueError(
                f"LatentActionEnv.step expects latent actions [{self.num_envs}, {self.num_actions}] (num_envs, "
                f"horizon x action size), got {list(latent.shape)}."
            )
        obs = self._obs if self._obs is not None else self.get_observations()
        out = super().step(self.chunk(obs, latent))
        self._obs = out[0]
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restore the wrapped env's state (the next step reads its observation afresh)."""
        super().load_state_dict(state)
        self._obs = None
