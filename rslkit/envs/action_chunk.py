"""Execute action chunks: one decision runs ``Ta`` env steps (the env of chunked policies, e.g. ReinFlow)."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv


class ActionChunkWrapper(VecEnv):
    """A VecEnv whose ``step`` takes a chunk ``[N, Ta, A]`` and runs its ``Ta`` actions in the wrapped env.

    The reward of a decision is the discounted sum ``R = sum_{j < n} gamma^j r_j`` over the ``n`` steps that belong
    to the episode the chunk started in, and ``extras["discount"] = gamma^n`` is the discount to apply to the value
    of the next decision (``gamma^Ta`` unless the episode ended inside the chunk).

    Episode ends inside a chunk: the wrapped env auto-resets, so it executes the remaining actions of the chunk in
    its new episode (a batched env cannot pause one member). Those steps are not added to ``R`` and the decision
    reports ``dones = True`` (and ``time_outs`` when the end was a truncation). With ``restart_ended`` (needs the
    env's ``reset_envs``) that spoiled start is thrown away: once the chunk is done, the envs whose episode ended
    inside it start a fresh episode again, so every episode begins at a decision, from its reset state, as it does
    when the policy is deployed (a chunk executor starts a new chunk at a reset). Without it, the observation returned
    is the new episode's a few steps after its reset, driven there by the end of the old episode's chunk (on
    ``so101-pick-place`` this alone made a BC policy fail in every episode after the first).
    Per-step data for episode statistics is in ``extras["step_rewards"]`` / ``extras["step_dones"]`` ``[N, Ta]``
    (``extras["restarted"] [N]`` marks the envs restarted at the chunk's end: the steps after their end belong to no
    episode), and ``extras["success"]`` holds the success flag of the episode that ended.

    Args:
        env: the per-step environment.
        horizon: ``Ta``, actions per decision.
        gamma: per-step discount.
        restart_ended: start a fresh episode, at the chunk's end, in envs whose episode ended inside the chunk.

    Raises:
        ValueError: for a horizon below 1, a discount outside [0, 1], or ``restart_ended`` on an env without
            ``reset_envs``.
    """

    def __init__(self, env: VecEnv, horizon: int, gamma: float, restart_ended: bool = False) -> None:
        if horizon < 1:
            raise ValueError(f"The chunk horizon must be >= 1, got {horizon}.")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}.")
        if restart_ended and not callable(getattr(env, "reset_envs", None)):
            raise ValueError(
                f"restart_ended needs an env that can restart single episodes (reset_envs); {type(env).__name__} "
                "cannot: let its episodes continue the chunk they ended in (restart_ended=False)."
            )
        self.env = env
        self.restart_ended = restart_ended
        self.horizon = horizon
        self.gamma = gamma
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.device = env.device
        self.cfg = env.cfg
        self.max_episode_length = math.ceil(int(torch.as_tensor(env.max_episode_length).max()) / horizon)
        if hasattr(env, "action_space"):
            self.action_space = env.action_space

    @property
    def episode_length_buf(self) -> torch.Tensor:  # type: ignore[override]
        """Episode lengths of the wrapped env, in env steps."""
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length_buf = value

    def get_observations(self) -> TensorDict:
        """Observations of the wrapped env."""
        return self.env.get_observations()

    def _check_chunk(self, chunk: torch.Tensor) -> torch.Tensor:
        n, a, h = self.num_envs, self.num_actions, self.horizon
        if chunk.dim() == 2 and chunk.shape == (n, h * a):
            chunk = chunk.view(n, h, a)
        if tuple(chunk.shape) != (n, h, a):
            raise ValueError(
                f"ActionChunkWrapper.step expects chunks of shape [{n}, {h}, {a}] (num_envs, horizon, num_actions), "
                f"got {list(chunk.shape)}; set the policy horizon to the wrapper's."
            )
        return chunk

    def step(self, chunk: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Run the ``Ta`` actions of ``chunk [N, Ta, A]`` (or ``[N, Ta*A]``).

        Returns:
            ``(obs, rewards [N], dones [N], extras)`` with ``extras`` keys ``time_outs``, ``discount``, ``steps``
            (env steps counted in ``R``), ``step_rewards``, ``step_dones``, ``log`` (per-step logs averaged) and,
            when the env reports it, ``success``.
        """
        chunk = self._check_chunk(chunk)
        n, dev = self.num_envs, self.device
        alive = torch.ones(n, dtype=torch.bool, device=dev)
        ret = torch.zeros(n, device=dev)
        discount = torch.ones(n, device=dev)
        dones = torch.zeros(n, dtype=torch.bool, device=dev)
        time_outs = torch.zeros(n, dtype=torch.bool, device=dev)
        steps = torch.zeros(n, dtype=torch.long, device=dev)
        success: torch.Tensor | None = None
        step_rewards, step_dones = [], []
        log_sums: dict[str, float] = {}
        log_counts: dict[str, int] = {}
        obs = None
        for j in range(self.horizon):
            obs, r, d, extras = self.env.step(chunk[:, j])
            r, d = r.to(dev).float(), d.to(dev).bool()
            ret += alive * discount * r
            steps += alive.long()
            ended = alive & d
            discount = torch.where(alive, discount * self.gamma, discount)
            dones |= ended
            if "time_outs" in extras:
                time_outs |= ended & extras["time_outs"].to(dev).bool()
            if "success" in extras:
                success = torch.zeros(n, dtype=torch.bool, device=dev) if success is None else success
                success = torch.where(ended, extras["success"].to(dev).bool(), success)
            alive &= ~d
            step_rewards.append(r)
            step_dones.append(d)
            for key, value in extras.get("log", {}).items():
                log_sums[key] = log_sums.get(key, 0.0) + float(value)
                log_counts[key] = log_counts.get(key, 0) + 1
        assert obs is not None
        restarted = dones & self.restart_ended
        if bool(restarted.any()):
            obs = self.env.reset_envs(restarted.nonzero().squeeze(-1))  # type: ignore[attr-defined]
        out: dict[str, Any] = {
            "restarted": restarted,
            "time_outs": time_outs,
            "discount": discount,
            "steps": steps,
            "step_rewards": torch.stack(step_rewards, dim=1),
            "step_dones": torch.stack(step_dones, dim=1),
            "log": {k: log_sums[k] / log_counts[k] for k in log_sums},
        }
        if success is not None:
            out["success"] = success
        return obs, ret, dones, out

    def state_dict(self) -> dict:
        """State of the wrapped env (when it has one)."""
        return self.env.state_dict() if hasattr(self.env, "state_dict") else {}

    def load_state_dict(self, state: dict) -> None:
        """Restore the wrapped env's state."""
        if hasattr(self.env, "load_state_dict") and state:
            self.env.load_state_dict(state)
