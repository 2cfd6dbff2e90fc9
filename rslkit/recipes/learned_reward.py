"""``--reward learned:PATH``: train against a progress critic instead of the task's reward (issue 15).

The run records the choice (``run_info["reward"]``), so ``--resume`` trains on with the same critic, while play,
record and export rebuild the plain task (the policy is judged by the true reward).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP
from rslkit.envs.vec_env import VecEnv
from rslkit.rewards.done_refit import DoneRefitCfg
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
    refit: DoneRefitCfg | None = None
    """Refits of the critic's done head on the run's own visits (``refit.every > 0``); None: never."""

    def __post_init__(self) -> None:
        if self.source != TASK_REWARD and not (self.source.startswith(LEARNED_PREFIX) and self.path):
            raise ValueError(f"--reward must be 'task' or 'learned:PATH' (a model.safetensors), got {self.source!r}.")
        if self.refit is not None:
            self.refit.check()
            if self.refit.every > 0 and not self.learned:
                raise ValueError("--reward_refit_every refits a learned reward's critic: pass --reward learned:PATH.")

    @property
    def path(self) -> str:
        return self.source[len(LEARNED_PREFIX) :] if self.source.startswith(LEARNED_PREFIX) else ""

    @property
    def learned(self) -> bool:
        return self.source != TASK_REWARD

    def to_dict(self) -> dict[str, Any]:
        """For the checkpoint's run info."""
        out = {"source": self.source, "goal": self.goal, "value": asdict(self.value or ValueCfg())}
        return {**out, "refit": asdict(self.refit) if self.refit is not None else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardChoice:
        refit = data.get("refit")
        refit_cfg = DoneRefitCfg(**refit) if refit is not None else None
        return cls(data["source"], data.get("goal"), ValueCfg(**data.get("value", {})), refit_cfg)


def wrap_env(env: VecEnv, choice: RewardChoice, device: str = "cpu") -> VecEnv:
    """``env`` itself for the task reward, else wrapped in :class:`LearnedRewardEnv` with the chosen critic.

    With ``choice.refit.every > 0`` the critic's done head is refitted on the run's visits against the goal
    examples saved beside it (``goal_examples.safetensors``, :mod:`rslkit.rewards.done_refit`).

    Raises:
        ValueError: a critic that knows several goals and no ``--reward_goal``, or one that rejects the env's
            observations (e.g. a camera that is off: the message names the flag).
        FileNotFoundError: refits asked for and no goal examples beside the critic.
    """
    if not choice.learned:
        return env
    from rslkit.rewards.done_refit import DoneRefitter
    from rslkit.rewards.goal_examples import GOAL_EXAMPLES, load_goal_examples
    from rslkit.rewards.learned_reward_env import LearnedRewardEnv
    from rslkit.rewards.progress_model import default_goal, load_progress_model

    critic, extra = load_progress_model(choice.path, device)
    refit = choice.refit
    examples = load_goal_examples(Path(choice.path).parent / GOAL_EXAMPLES) if refit and refit.every > 0 else None
    instructions = list(getattr(env, "instructions", None) or [])
    goal: str | None
    if choice.goal is None and instructions and INSTRUCTION_INDEX_GROUP in env.get_observations().keys():
        critic.add_goals(instructions)
        goal = None  # each episode's instruction
    else:
        goal = choice.goal or default_goal(critic, extra)
        if goal not in critic.goal_table.goals:
            critic.add_goals([goal])
    refitter = DoneRefitter(critic, examples, refit) if examples is not None and refit is not None else None
    return LearnedRewardEnv(env, critic, goal, choice.value or ValueCfg(), refitter=refitter)
