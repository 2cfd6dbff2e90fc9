"""``--reward learned:PATH``: train against a progress critic instead of the task's reward (issue 15).

The run records the choice (``run_info["reward"]``), so ``--resume`` trains on with the same critic, while play,
record and export rebuild the plain task (the policy is judged by the true reward).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP
from rslkit.envs.vec_env import VecEnv
from rslkit.rewards.value import ValueCfg

TASK_REWARD = "task"
LEARNED_PREFIX = "learned:"


@dataclass
class RewardChoice:
    """What ``--reward`` and its companion flags asked for."""

    source: str = TASK_REWARD
    """``task`` or ``learned:PATH`` (a critic written by ``python -m rslkit.rewards train``)."""
    goal: str | None = None
    """Language goal given to the critic (default: each episode's instruction for envs that draw one, e.g.
    ``so101-pick-place``; else the critic's only goal)."""
    value: ValueCfg | None = None

    def __post_init__(self) -> None:
        if self.source != TASK_REWARD and not (self.source.startswith(LEARNED_PREFIX) and self.path):
            raise ValueError(f"--reward must be 'task' or 'learned:PATH' (a model.safetensors), got {self.source!r}.")

    @property
    def path(self) -> str:
        return self.source[len(LEARNED_PREFIX) :] if self.source.startswith(LEARNED_PREFIX) else ""

    @property
    def learned(self) -> bool:
        return self.source != TASK_REWARD

    def to_dict(self) -> dict[str, Any]:
        """For the checkpoint's run info."""
        return {"source": self.source, "goal": self.goal, "value": asdict(self.value or ValueCfg())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardChoice:
        return cls(data["source"], data.get("goal"), ValueCfg(**data.get("value", {})))


def wrap_env(env: VecEnv, choice: RewardChoice, device: str = "cpu") -> VecEnv:
    """``env`` itself for the task reward, else wrapped in :class:`LearnedRewardEnv` with the chosen critic.

    Raises:
        ValueError: a critic that knows several goals and no ``--reward_goal``, or one that rejects the env's
            observations (e.g. a camera that is off: the message names the flag).
    """
    if not choice.learned:
        return env
    from rslkit.rewards.learned_reward_env import LearnedRewardEnv
    from rslkit.rewards.progress_model import default_goal, load_progress_model

    critic, extra = load_progress_model(choice.path, device)
    instructions = list(getattr(env, "instructions", None) or [])
    if choice.goal is None and instructions and INSTRUCTION_INDEX_GROUP in env.get_observations().keys():
        critic.add_goals(instructions)
        return LearnedRewardEnv(env, critic, None, choice.value or ValueCfg())  # each episode's instruction
    goal = choice.goal or default_goal(critic, extra)
    if goal not in critic.goal_table.goals:
        critic.add_goals([goal])
    return LearnedRewardEnv(env, critic, goal, choice.value or ValueCfg())
