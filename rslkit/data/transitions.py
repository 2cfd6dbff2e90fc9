"""Demonstrations (e.g. a LeRobotDataset v3.0) as replay-buffer transitions ``(s, a, r, s', terminated, truncated)``.

Frame ``t`` of an episode becomes the transition from its observation to the observation of frame ``t + 1``. The
dataset does not hold the observation after an episode's last action, so the last frame is stored as

- terminated (no bootstrap; its ``next_obs`` is a placeholder) when the dataset's ``next.done`` says the action ended
  the episode, or
- truncated with ``next_valid = False`` otherwise: the replay buffer gives it weight 0 and the n-step returns of the
  frames before it bootstrap from the last observation that is known.

LeRobot's ``next.done`` (and rslkit's recorder) also mark time-outs; for a task whose episodes end only by a time
limit pass ``done_is_terminal=False``, so that its last frames are truncated instead.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tensordict import TensorDict

from rslkit.data.demonstrations import ACTION_KEY, REWARD_KEY, Demonstrations
from rslkit.data.lerobot_format import INFO_PATH
from rslkit.data.lerobot_reader import read_lerobot_dataset

CONVERT_DEMOS_HINT = (
    "demonstrations are LeRobotDataset v3.0 folders: record them with `python -m rslkit.record --task T --expert "
    "--episodes N --out DIR` (a task's scripted expert) or `python -m rslkit.record --checkpoint C --episodes N "
    "--out DIR` (a trained policy)"
)
"""How to make demonstrations in the one format on disk."""

ACTION_TOLERANCE = 1e-6
"""Actions this far outside ``[-1, 1]`` are accepted (float rounding of a rescale)."""


def _actions(demos: Demonstrations, action_bounds: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """``[F, A]`` in ``[-1, 1]``: rescaled from ``action_bounds`` when given, else as stored (checked)."""
    action = demos.actions.float()
    if action_bounds is not None:
        low, high = (torch.as_tensor(b, dtype=torch.float32).reshape(-1) for b in action_bounds)
        if low.numel() != demos.action_dim or high.numel() != demos.action_dim or not bool((high > low).all()):
            raise ValueError(
                f"action_bounds must be (low, high) with {demos.action_dim} values each and high > low, got "
                f"{low.tolist()} and {high.tolist()}."
            )
        action = 2.0 * (action - low) / (high - low) - 1.0
    lo, hi = float(action.min()), float(action.max())
    if lo < -1.0 - ACTION_TOLERANCE or hi > 1.0 + ACTION_TOLERANCE:
        where = "after rescaling with action_bounds" if action_bounds is not None else "as stored"
        raise ValueError(
            f"The dataset's '{ACTION_KEY}' values lie in [{lo:.4g}, {hi:.4g}] {where}, but SAC acts in [-1, 1]. "
            "The dataset does not say the robot's action bounds: pass action_bounds=(low, high) in the dataset's "
            "units to rescale them, or record the demonstrations with normalized actions."
        )
    return action.clamp(-1.0, 1.0)


def demonstrations_to_transitions(
    demos: Demonstrations,
    obs_group: str = "policy",
    rewards: torch.Tensor | None = None,
    action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    done_is_terminal: bool = True,
) -> TensorDict:
    """Transitions of every frame, for :meth:`rslkit.storage.replay_buffer.ReplayBuffer.add_demonstrations`.

    Args:
        demos: the dataset (:func:`rslkit.data.read_lerobot_dataset`).
        obs_group: observation group the ``observation.state`` vector is stored as.
        rewards: ``[F]`` reward of each frame's action, instead of the dataset's ``next.reward`` (e.g. from a
            learned reward model, :mod:`rslkit.rewards`).
        action_bounds: ``(low [A], high [A])`` of the actions in the dataset's units, to rescale them to
            ``[-1, 1]``; None: the stored actions must already lie in ``[-1, 1]``.
        done_is_terminal: store an episode's last frame as terminated where ``next.done`` is set (see the module).

    Returns:
        Batch ``[F]``: ``obs/<obs_group> [F, D]``, ``next_obs/<obs_group>``, ``action [F, A]``, ``reward [F]``,
        ``terminated [F]``, ``truncated [F]``, ``next_valid [F]`` (bool).

    Raises:
        ValueError: when there are no rewards (neither ``next.reward`` nor ``rewards``), ``rewards`` has the wrong
            shape, or the actions are outside ``[-1, 1]`` (after rescaling).
    """
    f = demos.num_frames
    if rewards is None:
        if demos.rewards is None:
            raise ValueError(
                f"The dataset has no '{REWARD_KEY}' feature, and RL needs a reward per frame: record it with "
                "`.venv/bin/python -m rslkit.record` (which stores rewards), or label the frames (e.g. with a "
                "learned reward model) and pass them as demonstrations_to_transitions(demos, rewards=r) with r of "
                f"shape [{f}]."
            )
        rewards = demos.rewards
    if tuple(rewards.shape) != (f,):
        raise ValueError(f"rewards must have one value per frame, shape [{f}], got {list(rewards.shape)}.")
    last = torch.zeros(f, dtype=torch.bool)
    last[demos.episode_to - 1] = True
    ended = last & demos.dones.bool() if demos.dones is not None and done_is_terminal else torch.zeros_like(last)
    rows = torch.arange(f)
    next_rows = torch.where(last, rows, rows + 1).clamp_max(f - 1)  # the last frame: a placeholder, never used
    obs = demos.observations.float()
    return TensorDict(
        {
            "obs": {obs_group: obs},
            "next_obs": {obs_group: obs[next_rows]},
            "action": _actions(demos, action_bounds),
            "reward": rewards.float(),
            "terminated": ended,
            "truncated": last & ~ended,
            "next_valid": ~(last & ~ended),
        },
        batch_size=[f],
    )


def load_demonstrations(path: str | Path, obs_group: str = "policy", done_is_terminal: bool = True) -> TensorDict:
    """Demonstration transitions of a LeRobotDataset v3.0 folder (one with ``meta/info.json`` and rewards), for
    SAC's ``--agent.demo_path``: :func:`demonstrations_to_transitions` of :func:`read_lerobot_dataset`.

    Pickled files (``torch.save`` TensorDicts, ``.pt``) are refused: loading one would run code from the file.

    Args:
        path: the dataset folder.
        obs_group: the observation group ``observation.state`` is stored as.
        done_is_terminal: whether an episode's last frame with ``next.done`` is terminal (see the module).

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: a file or a folder that is not a LeRobotDataset v3.0 (the message says how to make one), a
            dataset without rewards, or actions outside ``[-1, 1]``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"Demonstrations '{path}' do not exist; set --agent.demo_path to a LeRobotDataset v3.0 folder "
            f"({CONVERT_DEMOS_HINT})."
        )
    if not (path / INFO_PATH).is_file():
        kind = "a pickled file" if path.is_file() else f"a folder without {INFO_PATH}"
        raise ValueError(
            f"Demonstrations '{path}' are {kind}, not a LeRobotDataset v3.0 (pickled TensorDict demonstrations are no "
            f"longer read: loading one runs code from the file); {CONVERT_DEMOS_HINT}."
        )
    return demonstrations_to_transitions(read_lerobot_dataset(path), obs_group, done_is_terminal=done_is_terminal)
