"""Step-by-step execution of an action-chunk policy in a batch of envs (evaluation, recording, ``play.py``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict


class ChunkExecutor:
    """Turns ``obs -> chunk [N, Ta, A]`` into ``obs -> action [N, A]``.

    Each env executes the first ``execute_steps`` actions of its chunk one by one and asks for a new chunk when
    they are used up or its episode ended (:meth:`reset`); chunks are computed only for the envs that need one.
    Executing fewer actions than the chunk holds is receding-horizon control (Diffusion Policy executes 8 of 16):
    the policy sees the result of its grasp sooner, at the cost of more chunk computations.

    Args:
        chunk_fn: ``obs (batch [M]) -> chunk [M, Ta, A]`` in env units.
        horizon: ``Ta``.
        execute_steps: actions executed per chunk, ``1 <= execute_steps <= Ta``; 0 or None: the whole chunk.

    Raises:
        ValueError: ``execute_steps`` outside ``[0, horizon]``.
    """

    def __init__(
        self, chunk_fn: Callable[[TensorDict], torch.Tensor], horizon: int, execute_steps: int | None = None
    ) -> None:
        if execute_steps is not None and not 0 <= execute_steps <= horizon:
            raise ValueError(
                f"execute_steps={execute_steps} is outside [0, {horizon}]: a chunk holds {horizon} actions "
                "(0 executes all of them)."
            )
        self.chunk_fn = chunk_fn
        self.horizon = horizon
        self.execute_steps = execute_steps or horizon
        self.chunks: torch.Tensor | None = None
        self.position: torch.Tensor | None = None

    def __call__(self, obs: TensorDict) -> torch.Tensor:
        """Next action ``[N, A]`` of every env."""
        n = obs.batch_size[0]
        if self.position is None or self.position.shape[0] != n:
            self.position = torch.full((n,), self.horizon, dtype=torch.long, device=obs.device)
            self.chunks = None
        need = (self.position >= self.execute_steps).nonzero().squeeze(-1)
        if need.numel() > 0:
            fresh = self.chunk_fn(obs if need.numel() == n else obs[need])
            if self.chunks is None:
                self.chunks = torch.zeros(n, *fresh.shape[1:], dtype=fresh.dtype, device=fresh.device)
            self.chunks[need] = fresh
            self.position[need] = 0
        assert self.chunks is not None
        actions = self.chunks[torch.arange(n, device=self.chunks.device), self.position]
        self.position += 1
        return actions

    def reset(self, dones: torch.Tensor | None = None) -> None:
        """Drop the rest of the chunk of envs whose episode ended (all envs when ``dones`` is None)."""
        if self.position is None:
            return
        if dones is None:
            self.position.fill_(self.horizon)
        else:
            self.position[dones.to(self.position.device).bool()] = self.horizon
