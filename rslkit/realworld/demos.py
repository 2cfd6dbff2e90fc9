"""Scripted demonstrations: run an expert in a VecEnv and keep whole episodes as replay-buffer transitions.

:func:`record_expert_demonstrations` gives the batch ``ReplayBuffer.add_demonstrations`` takes (for example the
"20 scripted demonstrations" of so101-lift), :func:`expert_stats` measures an expert (success rate, return).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.realworld.experts import as_expert_observation
from rslkit.realworld.interventions import Expert
from rslkit.realworld.sim_robot import StartStates


def _expert_actions(expert: Expert, obs: TensorDict, noise: float, rng: np.random.Generator) -> torch.Tensor:
    action = np.asarray(expert(as_expert_observation(obs)), dtype=np.float32)
    if noise > 0:
        action = action + rng.normal(0.0, noise, action.shape).astype(np.float32)
    return torch.from_numpy(np.clip(action, -1.0, 1.0)).to(obs.device)


def _transition(obs, action, reward, next_obs, terminated, truncated, next_valid) -> TensorDict:
    return TensorDict(
        {
            "obs": obs,
            "action": action,
            "reward": reward,
            "next_obs": next_obs,
            "terminated": terminated,
            "truncated": truncated,
            "next_valid": next_valid,
        },
        batch_size=[action.shape[0]],
    )


def record_expert_demonstrations(
    env: Any,
    expert: Expert,
    episodes: int,
    noise: float = 0.0,
    seed: int = 0,
    successful_only: bool = False,
    start_states: StartStates | None = None,
    max_steps: int | None = None,
) -> TensorDict:
    """Run ``expert`` in every env of ``env`` until ``episodes`` whole episodes are done; return their transitions.

    Episodes already under way when recording starts (``episode_length_buf > 0``) are not kept. On a TorchTask the
    next observations of the last steps are the true final ones (``request_final_obs``); an env without them marks
    its truncated last steps ``next_valid = False``.

    Args:
        env: a VecEnv (any ``num_envs``; more envs record faster).
        expert: observation groups ``[N, D]`` -> actions ``[N, A]`` in ``[-1, 1]``.
        noise: std of Gaussian noise added to the expert's actions (then clipped), for varied demonstrations.
        seed: seed of that noise.
        successful_only: keep only episodes with ``extras["success"]`` (the env must report it).
        start_states: if given, the states of kept episodes are added to it (return-and-explore).
        max_steps: give up after this many env steps (default ``20 * episodes * max_episode_length / num_envs``).

    Returns:
        Batch ``[M]`` of consecutive steps, episode after episode: ``obs/<group>``, ``next_obs/<group>``,
        ``action [M, A]``, ``reward [M]``, ``terminated [M]``, ``truncated [M]``, ``next_valid [M]`` (the format of
        ``ReplayBuffer.add_demonstrations``), plus ``episode [M]`` (0, 1, ...) and, where the env reports success,
        ``success [M]`` (the episode's).

    Raises:
        RuntimeError: fewer than ``episodes`` kept episodes within ``max_steps``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    if callable(getattr(env, "request_final_obs", None)):
        env.request_final_obs()
    n, rng = int(env.num_envs), np.random.default_rng(seed)
    keep = (env.episode_length_buf == 0).cpu().clone()
    steps: list[list[TensorDict]] = [[] for _ in range(n)]
    states: list[list[dict]] = [[] for _ in range(n)]
    kept: list[tuple[TensorDict, bool]] = []
    reported = False
    limit = max_steps or 20 * episodes * int(env.max_episode_length) // n + 1
    obs = env.get_observations()
    for _ in range(limit):
        if start_states is not None:
            for i in range(n):
                states[i].append(env.env_state(i))
        action = _expert_actions(expert, obs, noise, rng)
        next_obs, reward, dones, extras = env.step(action)
        final = extras.get("final_obs")
        true_next = final if final is not None else next_obs
        time_outs = extras["time_outs"].bool()
        next_valid = torch.ones_like(time_outs) if final is not None else ~(dones.bool() & time_outs)
        step = _transition(obs, action, reward, true_next, dones.bool() & ~time_outs, time_outs, next_valid)
        success = extras.get("success")
        reported = reported or success is not None
        for i in range(n):
            steps[i].append(step[i].cpu().clone())
            if not bool(dones[i]):
                continue
            ok = bool(success[i]) if success is not None else False
            if successful_only and success is None:
                raise ValueError("successful_only needs an env that reports extras['success'].")
            if bool(keep[i]) and (ok or not successful_only) and len(kept) < episodes:
                kept.append((TensorDict.stack(steps[i]), ok))
                if start_states is not None:
                    start_states.add_episode(states[i])
            keep[i], steps[i], states[i] = True, [], []
        obs = next_obs
        if len(kept) >= episodes:
            break
    if len(kept) < episodes:
        raise RuntimeError(
            f"Recorded {len(kept)} of {episodes} episodes within {limit} steps (successful_only="
            f"{successful_only}); raise max_steps or check the expert."
        )
    parts = []
    for index, (episode, ok) in enumerate(kept):
        m = episode.batch_size[0]
        episode["episode"] = torch.full((m,), index, dtype=torch.long)
        if reported:
            episode["success"] = torch.full((m,), ok, dtype=torch.bool)
        parts.append(episode)
    return TensorDict.cat(parts)


def expert_stats(env: Any, expert: Expert, episodes: int, noise: float = 0.0, seed: int = 0) -> dict[str, float]:
    """``success_rate`` (NaN for an env that does not report success) and ``mean_return`` of ``episodes`` whole
    episodes of ``expert`` (see :func:`record_expert_demonstrations`)."""
    demos = record_expert_demonstrations(env, expert, episodes, noise=noise, seed=seed)
    ends = demos["terminated"] | demos["truncated"]
    returns = torch.zeros(episodes).index_add_(0, demos["episode"], demos["reward"].float().cpu())
    success = float(demos["success"][ends].float().mean()) if "success" in demos.keys() else float("nan")
    return {"success_rate": success, "mean_return": float(returns.mean()), "episodes": float(episodes)}
