"""Where a real robot's reward and episode end come from: topics (fed by the node), a plug-in by name, or nothing.

A source is asked once per transition, on the control thread, when the next observation is known: transition ``k``
(observation ``k``, action ``k``) gets the reward and episode end that hold at tick ``k + 1``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from rslkit.utils.plugins import load_plugin

Outcome = tuple[float, bool, bool]
"""``(reward, done, intervention)`` of one transition."""


class RewardSource(Protocol):
    """Gives each transition its reward, episode end (termination) and intervention flag."""

    def outcome(self, next_obs: Mapping[str, np.ndarray]) -> Outcome:
        """The outcome of the transition that led to ``next_obs`` (``{group: float32 [D]}``)."""
        ...

    def episode_started(self) -> None:
        """A new episode starts: forget episode ends signalled before it."""
        ...


class NoReward:
    """Reward 0, never done: episodes end at ``max_episode_steps`` (e.g. the learner computes rewards itself)."""

    def outcome(self, next_obs: Mapping[str, np.ndarray]) -> Outcome:
        return 0.0, False, False

    def episode_started(self) -> None:
        pass


class TopicReward:
    """Rewards and episode ends from messages: the newest reward holds until the next one arrives; an episode end
    ends the transition in progress when it arrived.

    The node calls :meth:`on_reward`, :meth:`on_done` (``std_msgs/Float32`` and ``std_msgs/Bool``) or
    :meth:`on_json` (``std_msgs/String``) from the executor that also runs the ticks, so no locking is needed.
    """

    def __init__(self) -> None:
        self.reward = 0.0
        self.done = False
        self.intervention = False
        self.ignored = 0
        """Messages ignored (non-finite reward, malformed JSON)."""

    def on_reward(self, value: float) -> None:
        """A reward message."""
        if math.isfinite(value):
            self.reward = float(value)
        else:
            self.ignored += 1

    def on_done(self, flag: bool) -> None:
        """An episode-end message (True ends the episode)."""
        self.done = self.done or bool(flag)

    def on_json(self, text: str) -> None:
        """``{"reward": r, "done": b, "intervention": b}``, each key optional."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            if "reward" in data:
                reward = data["reward"]
                if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
                    raise ValueError(f"reward {reward!r}")
                self.reward = float(reward)
            self.on_done(data.get("done") is True)
            if "intervention" in data:
                self.intervention = data["intervention"] is True
        except ValueError:
            self.ignored += 1

    def outcome(self, next_obs: Mapping[str, np.ndarray]) -> Outcome:
        done, self.done = self.done, False
        return self.reward, done, self.intervention

    def episode_started(self) -> None:
        self.done = False


class PluginReward:
    """``function(obs) -> (reward, done)`` or ``(reward, done, intervention)``, loaded by its ``module:function``
    name (e.g. a success classifier over joint positions).

    Raises:
        ValueError: when the name does not resolve to a callable.
    """

    def __init__(self, name: str) -> None:
        self.fn = load_plugin(name, "--actor.reward_fn")
        if not callable(self.fn):
            raise ValueError(f"--actor.reward_fn {name}: {type(self.fn).__name__} is not callable.")
        self.name = name

    def outcome(self, next_obs: Mapping[str, np.ndarray]) -> Outcome:
        result = self.fn(next_obs)
        if not isinstance(result, tuple) or len(result) not in (2, 3):
            raise ValueError(f"reward function {self.name} returned {result!r}; return (reward, done[, intervention]).")
        reward = float(result[0])
        if not math.isfinite(reward):
            raise ValueError(f"reward function {self.name} returned the non-finite reward {reward}.")
        return reward, bool(result[1]), bool(result[2]) if len(result) == 3 else False

    def episode_started(self) -> None:
        pass


def make_reward_source(kind: str, reward_fn: str = "") -> RewardSource:
    """The source ``kind`` names (``topic`` and ``json`` both give a :class:`TopicReward`)."""
    if kind == "plugin":
        return PluginReward(reward_fn)
    if kind == "none":
        return NoReward()
    return TopicReward()
