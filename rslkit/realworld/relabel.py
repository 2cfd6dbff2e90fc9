"""Demonstrations relabelled with the actor's reward plug-in, so that offline and online rewards agree.

The actor's ``--actor.reward`` replaces the env's reward on every transition it streams; demonstrations loaded with
``--agent.demo_path`` keep the reward they were recorded with (a task's hand-written reward in simulation, nothing
meaningful on a robot). RLPD samples half of every batch from them, so a learner that mixes the two learns from two
reward scales. :func:`relabel_demonstrations` runs the same plug-in over the demonstrations, episode by episode and
in order, as the actor would have; :func:`relabel_dataset` (``python -m rslkit.rewards relabel``) reads a
LeRobotDataset v3.0 and writes a copy with the new ``next.reward``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.data.demonstrations import ACTION_KEY, ENV_STATE_KEY, OBS_KEY, Demonstrations
from rslkit.data.lerobot_meta import feature_names
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.data.lerobot_writer import write_lerobot_dataset
from rslkit.data.transitions import demonstrations_to_transitions
from rslkit.link.spool_writer import RewardFn
from rslkit.link.transitions import TransitionBatch


def _episodes(done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Episode index and step within it of every transition of consecutive episodes ending at ``done``."""
    episode = np.concatenate([[0], np.cumsum(done[:-1])]).astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], episode[1:] != episode[:-1]]))
    step = np.arange(len(done), dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, len(done))))
    return episode, step


def relabel_demonstrations(demos: TensorDict, reward: RewardFn, batch_size: int = 4096) -> TensorDict:
    """``demos`` (the transitions of ``--agent.demo_path``) with ``reward`` replaced by ``reward(batch)``'s.

    Transitions are consecutive steps, episode after episode (as
    :func:`~rslkit.data.transitions.load_demonstrations` gives them); an episode ends at ``terminated | truncated``.
    They reach ``reward`` in order, as :class:`~rslkit.link.transitions.TransitionBatch` es of at most
    ``batch_size``, keyed by episode index and step, with ``intervention`` set (a demonstration is a human's) and
    policy version 0; a plug-in that keeps per-episode state (the progress critic's value) sees each episode from its
    first step. Use a fresh plug-in: one that already scored other episodes may hold values under the same episode
    indices.

    Args:
        demos: batch ``[M]`` with ``obs/<group>``, ``next_obs/<group>``, ``action``, ``reward``, ``terminated`` and
            ``truncated``.
        reward: the plug-in (:func:`~rslkit.realworld.rewards.load_reward`).
        batch_size: transitions per call.

    Returns:
        A copy of ``demos`` with the new rewards (the dtype and device of the old ones).

    Raises:
        ValueError: a key missing, a batch that is not 1-D, or a plug-in that returns the wrong number of finite
            rewards.
    """
    missing = [k for k in ("obs", "next_obs", "action", "reward", "terminated", "truncated") if k not in demos.keys()]
    if missing or demos.batch_dims != 1:
        raise ValueError(
            f"Demonstrations need a 1-D batch with obs, next_obs, action, reward, terminated and truncated; "
            f"missing {missing}, batch size {tuple(demos.batch_size)}."
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    n = int(demos.batch_size[0])
    truncated = demos["truncated"].reshape(n).bool().cpu().numpy()
    done = demos["terminated"].reshape(n).bool().cpu().numpy() | truncated
    episode, step = _episodes(done)
    action = demos["action"].detach().cpu().float().numpy()
    obs = {k: v.detach().cpu().numpy() for k, v in demos["obs"].items()}
    next_obs = {k: v.detach().cpu().numpy() for k, v in demos["next_obs"].items()}
    rewards = np.empty(n, dtype=np.float32)
    for lo in range(0, n, batch_size):
        part = slice(lo, min(lo + batch_size, n))
        m = part.stop - lo
        batch = TransitionBatch(
            obs={k: v[part] for k, v in obs.items()},
            action=action[part],
            reward=np.zeros(m, np.float32),
            done=done[part],
            truncated=truncated[part],
            next_obs={k: v[part] for k, v in next_obs.items()},
            episode=episode[part],
            step=step[part],
            policy_version=np.zeros(m, np.int64),
            intervention=np.ones(m, bool),
        )
        out = np.asarray(reward(batch), dtype=np.float32).reshape(-1)
        if out.shape != (m,) or not np.isfinite(out).all():
            raise ValueError(
                f"The reward plug-in returned {out.shape[0]} rewards for {m} transitions"
                + ("" if out.shape != (m,) else " with non-finite values")
                + "; it must return one finite reward per transition."
            )
        rewards[part] = out
    relabelled = demos.clone()
    old = demos["reward"]
    relabelled["reward"] = torch.from_numpy(rewards).to(device=old.device, dtype=old.dtype).reshape(old.shape)
    return relabelled


def relabel_dataset(
    src: str | Path, out: str | Path, reward: RewardFn, obs_group: str = "policy", overwrite: bool = False
) -> tuple[Demonstrations, torch.Tensor]:
    """Write the LeRobotDataset ``src`` to ``out`` with ``next.reward`` replaced by ``reward``'s
    (:func:`relabel_demonstrations` over its transitions); everything else (names, tasks, cameras, re-encoded) stays.

    The dataset holds no observation after an episode's last action, so that frame is scored against itself (as
    :func:`~rslkit.data.transitions.demonstrations_to_transitions` stores it). A dataset without rewards (a robot's
    teleoperated demonstrations) gets its first ones.

    Args:
        src: the demonstrations (``--agent.demo_path``), a LeRobotDataset v3.0 folder.
        out: the dataset to write.
        reward: the plug-in.
        obs_group: the observation group ``observation.state`` is (what the plug-in reads).
        overwrite: replace a dataset at ``out``.

    Returns:
        The demonstrations as read and the new rewards ``[F]``.

    Raises:
        ValueError: see :func:`relabel_demonstrations` and :func:`~rslkit.data.lerobot_writer.write_lerobot_dataset`.
    """
    demos = read_lerobot_dataset(src, cameras="all")
    before = demos.rewards if demos.rewards is not None else torch.zeros(demos.num_frames)
    transitions = demonstrations_to_transitions(demos, obs_group, rewards=before)
    rewards = relabel_demonstrations(transitions, reward)["reward"]
    info = demos.info
    write_lerobot_dataset(
        out,
        demos.to_episodes(rewards),
        demos.fps,
        robot_type=str(info.get("robot_type") or "rslkit"),
        obs_names=feature_names(info, OBS_KEY),
        action_names=feature_names(info, ACTION_KEY),
        overwrite=overwrite,
        env_state_names=feature_names(info, ENV_STATE_KEY),
    )
    return demos, rewards
