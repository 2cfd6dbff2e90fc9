"""``--reward learned:PATH``: train against a progress critic instead of the task's reward (issue 15).

The run records the choice (``run_info["reward"]``), so ``--resume`` trains on with the same critic, while play,
record and export rebuild the plain task (the policy is judged by the true reward).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from rslkit.envs.camera_groups import camera_group
from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP
from rslkit.envs.vec_env import VecEnv
from rslkit.rewards.done_refit import DoneRefitCfg
from rslkit.rewards.value import ValueCfg
from rslkit.utils.config import field_paths, from_dict, to_dict
from rslkit.utils.validation import validate

TASK_REWARD = "task"
LEARNED_PREFIX = "learned:"

RENAMED_FLAGS: dict[str, str] = {
    "--reward_goal": "--reward.goal",
    "--reward_stride": "--reward.stride",
    "--reward_dead_band": "--reward.dead_band",
    "--reward_done_threshold": "--reward.done_threshold",
    "--reward_end_on_done": "--reward.end_on_done",
    "--reward_done_bonus": "--reward.done_bonus",
    "--reward_scale": "--reward.scale",
    "--reward_accumulate": "--reward.accumulate",
    "--reward_progress_weight": "--reward.progress_weight",
    "--reward_done_term": "--reward.done_term",
    "--reward_refit_every": "--reward.refit.every",
    "--reward_refit_updates": "--reward.refit.updates",
    "--reward_refit_visit_prior": "--reward.refit.visit_prior",
    "--reward_refit_encoder": "--reward.refit.encoder",
}
"""The flat ``--reward_*`` flags of earlier releases -> the ``--reward.*`` field that replaced each."""


@dataclass
class RewardCfg(ValueCfg):
    """``--reward.<field>``: the settings of a learned reward (``--reward learned:PATH``): how the critic's progress
    becomes rewards (the fields of :class:`~rslkit.rewards.value.ValueCfg`: ``--reward.dead_band 0.02``), its goal,
    and refits of its done head (``--reward.refit.every 100``)."""

    goal: str | None = None
    """Language goal given to the critic (default: each episode's instruction for envs that draw one, e.g.
    ``so101-pick-place``; else the critic's only goal)."""
    refit: DoneRefitCfg = field(default_factory=DoneRefitCfg)
    """Refits of the critic's done head on the run's own visits (``refit.every > 0``; 0, the default: never)."""


@dataclass
class RewardChoice:
    """What ``--reward`` and the ``--reward.*`` settings asked for."""

    source: str = TASK_REWARD
    """``task`` or ``learned:PATH`` (a critic written by ``python -m rslkit.rewards train``)."""
    cfg: RewardCfg = field(default_factory=RewardCfg)

    def __post_init__(self) -> None:
        if self.source != TASK_REWARD and not (self.source.startswith(LEARNED_PREFIX) and self.path):
            raise ValueError(f"--reward must be 'task' or 'learned:PATH' (a model.safetensors), got {self.source!r}.")

    def check(self) -> None:
        """Check the settings once the command line's ``--reward.*`` overrides are applied.

        Raises:
            ValueError: a bad setting (names ``--reward.<field>``), or a setting given for the task's own reward.
        """
        validate(self.cfg, "reward")
        if not self.learned:
            default = RewardCfg()
            changed = [p for p in field_paths(self.cfg) if _get(self.cfg, p) != _get(default, p)]
            if changed:
                raise ValueError(
                    f"--reward.{changed[0]} sets a learned reward, and this run trains on the task's reward: "
                    "pass --reward learned:PATH (a critic written by python -m rslkit.rewards train)."
                )

    @property
    def path(self) -> str:
        return self.source[len(LEARNED_PREFIX) :] if self.source.startswith(LEARNED_PREFIX) else ""

    @property
    def learned(self) -> bool:
        return self.source != TASK_REWARD

    def to_dict(self) -> dict[str, Any]:
        """For the checkpoint's run info (plain data)."""
        return {"source": self.source, "cfg": to_dict(self.cfg)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardChoice:
        """Rebuild :meth:`to_dict` output (or a record of the flat-flag releases: ``goal``, ``value``, ``refit``)."""
        if "cfg" in data:
            return cls(data["source"], from_dict(RewardCfg, data["cfg"]))
        value = dict(data.get("value", {}))
        value["scale"] = value.pop("reward_scale", 1.0)
        cfg = {**value, "goal": data.get("goal"), "refit": data.get("refit") or {}}
        return cls(data["source"], from_dict(RewardCfg, cfg))


def _get(cfg: Any, path: str) -> Any:
    """The value of the field at dotted ``path`` of ``cfg``."""
    return reduce(getattr, path.split("."), cfg)


def refuse_renamed_flags(args: list[str]) -> None:
    """Raise ``ValueError`` naming the new flag for any old ``--reward_*`` flag among the command-line ``args``."""
    for arg in args:
        old = arg.split("=", 1)[0]
        if old in RENAMED_FLAGS:
            raise ValueError(f"{old} was renamed: use {RENAMED_FLAGS[old]} (every --reward_* flag is now --reward.*).")


def wrap_env(env: VecEnv, choice: RewardChoice, device: str = "cpu") -> VecEnv:
    """``env`` itself for the task reward, else wrapped in :class:`LearnedRewardEnv` with the chosen critic.

    With ``choice.cfg.refit.every > 0`` the critic's done head is refitted on the run's visits against the goal
    examples saved beside it (``goal_examples.safetensors``, :mod:`rslkit.rewards.done_refit`).

    Raises:
        ValueError: a critic that knows several goals and no ``--reward.goal``, one that reads cameras the task does
            not have, or one that rejects the env's observations (e.g. a camera that is off: the message names the
            flag).
        FileNotFoundError: refits asked for and no goal examples beside the critic.
    """
    if not choice.learned:
        return env
    from rslkit.rewards.done_refit import DoneRefitter
    from rslkit.rewards.goal_examples import GOAL_EXAMPLES, load_goal_examples
    from rslkit.rewards.learned_reward_env import LearnedRewardEnv
    from rslkit.rewards.progress_model import default_goal, load_progress_model

    critic, extra = load_progress_model(choice.path, device)
    _check_cameras(env, critic.cfg.cameras, choice.path)
    refit = choice.cfg.refit
    examples = load_goal_examples(Path(choice.path).parent / GOAL_EXAMPLES) if refit.every > 0 else None
    instructions = list(getattr(env, "instructions", None) or [])
    goal: str | None
    if choice.cfg.goal is None and instructions and INSTRUCTION_INDEX_GROUP in env.get_observations().keys():
        critic.add_goals(instructions)
        goal = None  # each episode's instruction
    else:
        goal = choice.cfg.goal or default_goal(critic, extra)
        if goal not in critic.goal_table.goals:
            critic.add_goals([goal])
    refitter = DoneRefitter(critic, examples, refit) if examples is not None else None
    return LearnedRewardEnv(env, critic, goal, choice.cfg, refitter=refitter)


def _check_cameras(env: VecEnv, cameras: tuple[str, ...], critic_path: str) -> None:
    """Raise ``ValueError`` when the critic reads a camera the task cannot render (a camera it can render but that is
    off is left to the critic's own check, which names ``--env.cameras``)."""
    available = tuple(getattr(getattr(env, "cfg", None), "available_cameras", ()))
    observed = env.get_observations().keys()
    missing = [name for name in cameras if name not in available and camera_group(name) not in observed]
    if not missing:
        return
    task = f"{type(env).__name__} has " + (f"only the cameras {list(available)}" if available else "no cameras")
    raise ValueError(
        f"The critic '{critic_path}' reads the camera(s) {missing}, and {task}. Use a critic that reads the state "
        "alone (python -m rslkit.rewards train --state_group policy, without --camera) or one trained with cameras "
        "this task has."
    )
