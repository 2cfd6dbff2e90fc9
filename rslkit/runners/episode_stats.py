"""Returns, lengths and success of finished episodes, tracked on the env's device."""

from __future__ import annotations

from collections import deque

import torch


class EpisodeStats:
    """Accumulates per-env return and length; keeps a window of the last finished episodes."""

    def __init__(self, num_envs: int, device: torch.device, window: int = 100) -> None:
        self.returns = torch.zeros(num_envs, device=device)
        self.lengths = torch.zeros(num_envs, device=device)
        self.finished_returns: deque[float] = deque(maxlen=window)
        self.finished_lengths: deque[float] = deque(maxlen=window)
        self.finished_success: deque[float] = deque(maxlen=window)
        self.num_finished = 0
        self.partial = torch.zeros(num_envs, dtype=torch.bool, device=device)
        """Envs whose current episode did not start at a reset (e.g. randomized initial episode lengths)."""

    def mark_partial(self) -> None:
        """Leave every env's current episode out of the statistics (its start was not a reset)."""
        self.partial.fill_(True)

    def update(self, rewards: torch.Tensor, dones: torch.Tensor, success: torch.Tensor | None) -> None:
        """Add one step of ``rewards [N]``; close the episodes where ``dones [N]`` is set."""
        self.returns += rewards
        self.lengths += 1
        ids = dones.nonzero().squeeze(-1)
        if ids.numel() == 0:
            return
        complete = ids[~self.partial[ids]]
        self.finished_returns.extend(self.returns[complete].tolist())
        self.finished_lengths.extend(self.lengths[complete].tolist())
        if success is not None:
            self.finished_success.extend(success[complete].float().tolist())
        self.num_finished += complete.numel()
        self.partial[ids] = False
        self.returns[ids] = 0.0
        self.lengths[ids] = 0.0

    def restart(self, env_ids: torch.Tensor) -> None:
        """Forget what was accumulated since the last episode end of ``env_ids`` (their env started a fresh
        episode outside ``dones``, e.g. an action-chunk wrapper restarting a spoiled episode start)."""
        self.returns[env_ids] = 0.0
        self.lengths[env_ids] = 0.0

    def summary(self) -> dict[str, float]:
        """Mean return, length and success rate over the window (empty until an episode finishes)."""
        out = {}
        if self.finished_returns:
            out["Train/mean_return"] = sum(self.finished_returns) / len(self.finished_returns)
            out["Train/mean_episode_length"] = sum(self.finished_lengths) / len(self.finished_lengths)
        if self.finished_success:
            out["Train/success_rate"] = sum(self.finished_success) / len(self.finished_success)
        return out

    def state_dict(self) -> dict:
        """Everything needed to continue the statistics after a resume."""
        return {
            "returns": self.returns.clone(),
            "lengths": self.lengths.clone(),
            "finished": (list(self.finished_returns), list(self.finished_lengths), list(self.finished_success)),
            "num_finished": self.num_finished,
            "partial": self.partial.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.returns.copy_(state["returns"])
        self.lengths.copy_(state["lengths"])
        for buf, values in zip(
            (self.finished_returns, self.finished_lengths, self.finished_success), state["finished"]
        ):
            buf.clear()
            buf.extend(values)
        self.num_finished = state["num_finished"]
        self.partial.copy_(state["partial"])
