"""Step-by-step execution of an action-chunk policy in a batch of envs (evaluation, recording, ``play.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from tensordict import TensorDict


class ChunkExecutor:
    """Turns ``obs -> chunk [N, Ta, A]`` into ``obs -> action [N, A]``.

    Each env executes the first ``execute_steps`` actions of its chunk one by one and asks for a new chunk when
    they are used up or its episode ended (:meth:`reset`); chunks are computed only for the envs that need one.
    Executing fewer actions than the chunk holds is receding-horizon control (Diffusion Policy executes 8 of 16):
    the policy sees the result of its grasp sooner, at the cost of more chunk computations.

    With ``ensemble_coeff`` (ACT's temporal ensembling, Zhao et al. 2023) a chunk is computed for every env at every
    step, and the action of step ``t`` is the weighted mean of what every chunk computed in the last ``Ta`` steps
    (since the episode began) predicted for ``t``: the ``i``-th oldest prediction weighs ``exp(-ensemble_coeff * i)``
    (0.01 in ACT and LeRobot: a slight preference for older predictions; larger values favour them more, negative
    ones favour the newest). Executed actions change smoothly, and one chunk's error is averaged with its
    neighbours', at ``Ta`` times the chunk computations of whole-chunk execution.

    Args:
        chunk_fn: ``obs (batch [M]) -> chunk [M, Ta, A]`` in env units.
        horizon: ``Ta``.
        execute_steps: actions executed per chunk, ``1 <= execute_steps <= Ta``; 0 or None: the whole chunk.
        ensemble_coeff: temporal ensembling with this weight decay (a finite float); None: off. Excludes
            ``execute_steps`` (every step replans).

    Raises:
        ValueError: ``execute_steps`` outside ``[0, horizon]``; a non-finite ``ensemble_coeff``, or one given
            together with ``execute_steps``.
    """

    def __init__(
        self,
        chunk_fn: Callable[[TensorDict], torch.Tensor],
        horizon: int,
        execute_steps: int | None = None,
        ensemble_coeff: float | None = None,
    ) -> None:
        if execute_steps is not None and not 0 <= execute_steps <= horizon:
            raise ValueError(
                f"execute_steps={execute_steps} is outside [0, {horizon}]: a chunk holds {horizon} actions "
                "(0 executes all of them)."
            )
        if ensemble_coeff is not None:
            if not math.isfinite(ensemble_coeff):
                raise ValueError(f"ensemble_coeff must be a finite float (ACT uses 0.01), got {ensemble_coeff}.")
            if execute_steps:
                raise ValueError(
                    f"Temporal ensembling (ensemble_coeff={ensemble_coeff}) computes a chunk every step; it cannot "
                    f"be combined with execute_steps={execute_steps}. Set one of them."
                )
        self.chunk_fn = chunk_fn
        self.horizon = horizon
        self.execute_steps = execute_steps or horizon
        self.ensemble_coeff = ensemble_coeff
        self.chunks: torch.Tensor | None = None
        self.position: torch.Tensor | None = None
        # temporal ensembling: weighted sums of the predictions for steps t .. t+Ta-1, their weights and counts
        self._sums: torch.Tensor | None = None
        self._weights: torch.Tensor | None = None
        self._counts: torch.Tensor | None = None

    def __call__(self, obs: TensorDict) -> torch.Tensor:
        """Next action ``[N, A]`` of every env."""
        if self.ensemble_coeff is not None:
            return self._ensembled(obs)
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

    def _ensembled(self, obs: TensorDict) -> torch.Tensor:
        """Temporal ensembling: add this step's chunk to the running sums, execute their mean for step ``t``."""
        assert self.ensemble_coeff is not None
        fresh = self.chunk_fn(obs)  # [N, Ta, A]
        n = fresh.shape[0]
        if self._sums is None or self._sums.shape[0] != n:
            self._sums = torch.zeros_like(fresh)
            self._weights = torch.zeros(n, self.horizon, 1, dtype=fresh.dtype, device=fresh.device)
            self._counts = torch.zeros(n, self.horizon, 1, dtype=fresh.dtype, device=fresh.device)
        assert self._weights is not None and self._counts is not None
        w = torch.exp(-self.ensemble_coeff * self._counts)  # the k-th prediction of a step weighs exp(-m k)
        self._sums += w * fresh
        self._weights += w
        self._counts += 1
        actions = self._sums[:, 0] / self._weights[:, 0]
        # step t is done: shift every buffer by one step, the slot of t + Ta starts empty
        for buf in (self._sums, self._weights, self._counts):
            buf.copy_(torch.cat((buf[:, 1:], torch.zeros_like(buf[:, :1])), 1))
        return actions

    def reset(self, dones: torch.Tensor | None = None) -> None:
        """Drop the rest of the chunk of envs whose episode ended (all envs when ``dones`` is None); with temporal
        ensembling, the predictions those envs' earlier chunks made."""
        if self._sums is not None:
            assert self._weights is not None and self._counts is not None
            ended = slice(None) if dones is None else dones.to(self._sums.device).bool()
            for buf in (self._sums, self._weights, self._counts):
                buf[ended] = 0.0
        if self.position is None:
            return
        if dones is None:
            self.position.fill_(self.horizon)
        else:
            self.position[dones.to(self.position.device).bool()] = self.horizon
