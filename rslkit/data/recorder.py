"""Record episodes of a policy running in a :class:`~rslkit.envs.VecEnv`."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import torch
from tensordict import TensorDict

from rslkit.data.demonstrations import Episode
from rslkit.envs.vec_env import VecEnv


def _action_bounds(env: VecEnv) -> tuple[torch.Tensor, torch.Tensor] | None:
    space = getattr(env, "action_space", None)
    if isinstance(space, gym.spaces.Box):
        low = torch.as_tensor(space.low, dtype=torch.float32, device=env.device).reshape(-1)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=env.device).reshape(-1)
        return low, high
    return None


@torch.inference_mode()
def record_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    num_episodes: int,
    action_noise: float = 0.0,
    obs_group: str = "policy",
    reset_policy: Callable[[torch.Tensor], None] | None = None,
    task: str = "",
    generator: torch.Generator | None = None,
    action_smoothing: float = 0.0,
) -> list[Episode]:
    """Run ``policy`` in all envs until ``num_episodes`` complete episodes were recorded.

    Only episodes that start at a reset are kept (an env whose ``episode_length_buf`` is not 0 when recording
    starts contributes from its next episode on). The recorded action is the one executed: the policy's action
    plus Gaussian ``action_noise`` (std, in the env's action units), low-pass filtered with ``action_smoothing``,
    clipped to a Box action space.

    Args:
        env: the environment.
        policy: ``obs -> actions [N, A]``.
        num_episodes: how many episodes to return (the first to complete).
        action_noise: std of the Gaussian noise added to every action (imperfect demonstrations).
        obs_group: observation group stored as ``observation.state``.
        reset_policy: called with ``dones [N]`` after each step (chunked or recurrent policies).
        task: task description stored with each episode.
        generator: random generator of the action noise.
        action_smoothing: ``alpha`` in ``[0, 1)`` of the filter ``a_t = alpha a_{t-1} + (1 - alpha) pi(o_t)``, restarted
            at every episode; smooth demonstrations, like a person's teleoperation, are easier to clone than the
            step-to-step jitter of an RL policy. 0: off.

    Returns:
        ``num_episodes`` episodes with observations, actions, rewards and dones.

    Raises:
        ValueError: for a missing observation group, a non-positive episode count or ``action_smoothing`` outside
            ``[0, 1)``.
        RuntimeError: when no episode finishes within 10 episode lengths.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}.")
    if not 0.0 <= action_smoothing < 1.0:
        raise ValueError(f"action_smoothing must be in [0, 1), got {action_smoothing}.")
    obs = env.get_observations()
    if obs_group not in obs.keys():
        raise ValueError(f"The env has no observation group '{obs_group}' (it has {sorted(obs.keys())}).")
    bounds = _action_bounds(env)
    n = env.num_envs
    history: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    start = torch.zeros(n, dtype=torch.long)
    valid = (env.episode_length_buf == 0).cpu()
    episodes: list[Episode] = []
    limit = 10 * int(torch.as_tensor(env.max_episode_length).max()) * max(1, -(-num_episodes // n))
    previous: torch.Tensor | None = None  # last executed actions, for the smoothing filter
    fresh = torch.ones(n, 1, dtype=torch.bool)  # envs at the first step of an episode: no filter
    for step in range(limit):
        actions = policy(obs)
        if action_noise > 0:
            noise = torch.randn(actions.shape, generator=generator, device=generator.device if generator else None)
            actions = actions + action_noise * noise.to(actions.device)
        if action_smoothing > 0 and previous is not None:
            smoothed = action_smoothing * previous + (1.0 - action_smoothing) * actions
            actions = torch.where(fresh.to(actions.device), actions, smoothed)
        if bounds is not None:
            actions = torch.maximum(torch.minimum(actions, bounds[1]), bounds[0])
        next_obs, rewards, dones, _ = env.step(actions)
        previous, fresh = actions, dones.cpu().bool().reshape(n, 1)
        history.append((obs[obs_group].cpu(), actions.cpu(), rewards.cpu().float(), dones.cpu().bool()))
        if reset_policy is not None:
            reset_policy(dones)
        for i in dones.cpu().nonzero().squeeze(-1).tolist():
            if valid[i] and len(episodes) < num_episodes:
                steps = history[int(start[i]) : step + 1]
                episodes.append(
                    Episode(
                        observations=torch.stack([h[0][i] for h in steps]),
                        actions=torch.stack([h[1][i] for h in steps]),
                        rewards=torch.stack([h[2][i] for h in steps]),
                        dones=torch.stack([h[3][i] for h in steps]),
                        task=task,
                    )
                )
            start[i], valid[i] = step + 1, True
        if len(episodes) >= num_episodes:
            return episodes
        obs = next_obs
    raise RuntimeError(f"Only {len(episodes)} of {num_episodes} episodes finished within {limit} steps.")
