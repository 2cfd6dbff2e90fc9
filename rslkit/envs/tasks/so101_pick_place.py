"""SO-101 arm picking the cube and placing it at a goal named only in a language instruction (``so101-pick-place``).

Goals are floor positions in the robot's base frame, named as the robot sees them: ``front`` is away from the base
(larger x), ``back`` near it, ``left`` is +y. The cube starts between them (the lift task's region), so every goal
needs a carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.columns import Columns
from rslkit.envs.expert import GoalDistance, Observation
from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.tasks.so101_arm import ARM_JOINTS, GRIPPER
from rslkit.envs.tasks.so101_lift import CUBE_HALF_SIZE, SO101LiftCfg, SO101LiftTask
from rslkit.envs.tasks.so101_pick_place_expert import SO101PickPlaceExpert
from rslkit.utils.validation import expect, finite, validate

GOAL_POSITIONS: dict[str, tuple[float, float]] = {
    "back left": (0.16, 0.12),
    "back right": (0.16, -0.12),
    "front left": (0.28, 0.12),
    "front right": (0.28, -0.12),
}
"""Goal name -> where the cube's centre rests (x, y; metres in the base frame). The corners of a 12 x 24 cm
rectangle around the cube's start region (x 0.2-0.28, |y| <= 0.05), each reached by the arm pointing down."""


@dataclass
class SO101PickPlaceCfg(SO101LiftCfg):
    """Goals, instruction, success tolerances and the extra reward weights of ``so101-pick-place``."""

    episode_length: int = 150
    """Control steps per episode (3 s at 50 Hz; the scripted expert has released the cube at the goal after 60 steps
    (median, at most 66 in 128 episodes): more than twice that, for slower learned policies)."""
    goals: tuple[str, ...] = tuple(GOAL_POSITIONS)
    """Names of the goals an episode samples from (uniformly, one per env at reset), keys of
    :data:`GOAL_POSITIONS` (``--env.goals "back left,front right"``). Goal index ``i`` is ``goals[i]``."""
    instruction_template: str = "put the cube in the {goal} corner"
    """The instruction of each goal: ``{goal}`` becomes its name."""
    goal_radius: float = 0.03
    """Success: the cube's centre is within this horizontal distance (metres) of the goal, ..."""
    rest_tolerance: float = 0.005
    """... at most this far (metres) above its resting height (on the floor, flat), and released: the gripper is
    commanded open and neither jaw touches the cube."""
    terminate_on_success: bool = False
    """End the episode at success. Off by default: the shaping terms pay every step, so a terminating success would
    teach a policy to postpone it; with the default, episodes time out and ``extras["success"]`` at the last step
    says whether the cube lies released at the goal then."""
    max_cube_travel: float = 0.4
    """The episode terminates when the cube is this far (metres, horizontally) from where it started (farther than
    any goal: at most ~0.21 from the start region)."""
    carry_weight: float = 4.0
    """``+w * (1 - tanh(d / carry_scale))`` while the cube is grasped, ``d``: horizontal distance cube to goal."""
    carry_scale: float = 0.1
    place_weight: float = 5.0
    """``+w * (1 - clip(height / lift_height, 0, 1))`` while the cube is within ``goal_radius`` of the goal
    (horizontally): lower it there. The lift term pays only away from the goal, so the two do not pull apart."""
    success_weight: float = 10.0
    """``+w`` per step in which the cube lies released at the goal."""

    def check(self) -> None:
        """Raise ``ConfigError`` for unknown or repeated goal names, a bad template or non-positive tolerances."""
        super().check()
        expect(len(self.goals) >= 1, "goals", f"must name at least one of {list(GOAL_POSITIONS)}, got none")
        unknown = [g for g in self.goals if g not in GOAL_POSITIONS]
        expect(not unknown, "goals", f"has unknown names {unknown}; choose from {list(GOAL_POSITIONS)}")
        expect(len(set(self.goals)) == len(self.goals), "goals", f"names a goal twice: {list(self.goals)}")
        expect("{goal}" in self.instruction_template, "instruction_template", "must contain '{goal}'")
        for name in ("goal_radius", "rest_tolerance", "carry_scale"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be > 0 (metres), got {value}")


class SO101PickPlaceTask(SO101LiftTask):
    """Pick the cube and place it at the goal of the episode's instruction ("put the cube in the back left corner").

    Actions as in :class:`~rslkit.envs.tasks.so101_lift.SO101LiftTask`. Each reset samples a goal index per env,
    uniformly over ``cfg.goals``; :attr:`goal_index` holds it, :attr:`instructions` the instruction of each index,
    :meth:`instruction` those of given envs, and :meth:`set_goals` assigns goals to episodes under way.

    Observation groups:

    - ``policy`` ``[N, 36]``: the lift task's 33 columns (joint positions 0-5, velocities 6-11, pad midpoint 12-14,
      cube 15-17, cube - pads 18-20, cube quaternion 21-24, jaw contacts 25-26, last action 27-32), then the goal
      position 33-35 (x, y, and the resting height of the cube's centre): privileged state for experts, critics
      and state-based baselines.
    - ``goal`` ``[N, 1]`` int64: the goal index (a dataset's ``task_index``; the language the policy is told).
    - ``proprio`` ``[N, 12]``: normalized joint positions (6) and the last action (6), what a vision-language-action
      policy reads besides its cameras and the instruction.
    - ``joint_pos`` ``[N, 6]``: the normalized joint positions alone (``proprio`` without the last action: a cloned
      policy cannot continue the last action's motion from it and must look where the cube is).
    - ``camera_<name>`` ``[N, H, W, 3]`` uint8 per camera of ``cfg.cameras``.

    Reward terms: the lift task's ``reach``, ``grasp``, ``open``, ``lift`` (paid away from the goal only),
    ``action_rate``, ``joint_vel``, plus ``carry`` (held, towards the goal), ``place`` (low at the goal) and
    ``success``. ``extras["success"]``: the cube lies released at the goal (read where ``dones``);
    ``extras["goal"]`` ``[N]``: the goal index of the episode that ran in this step (taken before auto-resets), so
    evaluation can report success per instruction. Episodes time out (or end at success with
    ``cfg.terminate_on_success``), and terminate when the cube is pushed away (``max_cube_travel``).
    """

    cfg: SO101PickPlaceCfg

    def __init__(self, cfg: SO101PickPlaceCfg, device: str | torch.device = "cpu") -> None:
        validate(cfg, "env")  # the goals are needed before the base class resets the envs
        dev = torch.device(device)
        self.goal_index = torch.zeros(cfg.num_envs, dtype=torch.long, device=dev)
        """``[N]`` goal index of each env's episode (into ``cfg.goals`` and :attr:`instructions`)."""
        xy = torch.tensor([GOAL_POSITIONS[g] for g in cfg.goals], dtype=torch.float32, device=dev)
        self.goal_positions = torch.cat((xy, torch.full((len(cfg.goals), 1), CUBE_HALF_SIZE, device=dev)), -1)
        """``[G, 3]`` where the cube's centre rests at each goal."""
        self.instructions = [cfg.instruction_template.format(goal=g) for g in cfg.goals]
        """The instruction of each goal index."""
        super().__init__(cfg, device)

    def instruction(self, env_ids: torch.Tensor | list[int] | None = None) -> list[str]:
        """The instructions of the episodes of ``env_ids`` (default: every env), in that order."""
        ids = self.goal_index if env_ids is None else self.goal_index[torch.as_tensor(env_ids, device=self.device)]
        return [self.instructions[int(i)] for i in ids.reshape(-1).tolist()]

    def set_goals(self, goal_index: torch.Tensor | int, env_ids: torch.Tensor | list[int] | None = None) -> TensorDict:
        """Give the episodes under way in ``env_ids`` (default: every env) the goals ``goal_index`` (one per env, or
        one for all), e.g. to evaluate each instruction equally often; returns the observations (batch ``[N]``).

        Raises:
            ValueError: a goal index outside ``[0, len(cfg.goals))``.
        """
        ids = self._all_envs if env_ids is None else torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
        ids = ids.reshape(-1)
        goals = torch.as_tensor(goal_index, dtype=torch.long, device=self.device).expand(ids.shape)
        if goals.numel() and not (0 <= int(goals.min()) and int(goals.max()) < len(self.cfg.goals)):
            raise ValueError(
                f"Goal indices must be in [0, {len(self.cfg.goals)}) (the goals {list(self.cfg.goals)}), got "
                f"{goals.unique().tolist()}."
            )
        self.goal_index[ids] = goals
        self._obs = None
        return self.get_observations()

    def goal(self) -> torch.Tensor:
        """``[N, 3]`` the goal position of each env's episode."""
        return self.goal_positions[self.goal_index]

    def goal_distance(self) -> torch.Tensor:
        """``[N]`` horizontal distance (metres) of the cube's centre from the goal."""
        return torch.linalg.vector_norm(self.cube_pos[:, :2] - self.goal()[:, :2], dim=-1)

    def released(self) -> torch.Tensor:
        """``[N]`` bool: the gripper is commanded open and neither jaw touches the cube."""
        return (self.last_action[:, -1] > 0) & (self.touch.sum(-1) == 0)

    # ----------------------------------------------------------------- state and resets
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {**super()._state_tensors(), "goal_index": self.goal_index}

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        super()._reset_envs(env_ids)
        g = torch.randint(len(self.cfg.goals), (env_ids.numel(),), generator=self.generator, device=self.device)
        self.goal_index[env_ids] = g

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """As :meth:`TorchTask.step`, plus ``extras["goal"]`` ``[N]``: the goal index of the step's episodes."""
        goal = self.goal_index.clone()  # before auto-resets draw new goals
        obs, rewards, dones, extras = super().step(actions)
        extras["goal"] = goal
        return obs, rewards, dones, extras

    # ----------------------------------------------------------------- observations, rewards, success
    observation_names = {
        "policy": [*SO101LiftTask.observation_names["policy"], *(f"goal.{a}" for a in "xyz")],
        "goal": ["goal_index"],
        "proprio": [f"{j}.pos_normalized" for j in (*ARM_JOINTS, GRIPPER)]
        + [f"last_action.{j}" for j in (*ARM_JOINTS, GRIPPER)],
        "joint_pos": [f"{j}.pos_normalized" for j in (*ARM_JOINTS, GRIPPER)],
    }

    def _observations(self) -> TensorDict:
        obs = super()._observations()
        lift = obs["policy"]
        obs["policy"] = torch.cat((lift, self.goal()), -1)
        obs["goal"] = self.goal_index.unsqueeze(-1).clone()
        obs["proprio"] = torch.cat((lift[:, 0:6], lift[:, 27:33]), -1)
        obs["joint_pos"] = lift[:, 0:6].clone()
        return obs

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        c = self.cfg
        terms = super()._reward_terms(actions)  # its "success" term is this task's (self._success)
        at_goal = (self.goal_distance() < c.goal_radius).float()
        terms["lift"] = terms["lift"] * (1.0 - at_goal)
        terms["carry"] = (
            c.carry_weight * self.grasped().float() * (1.0 - torch.tanh(self.goal_distance() / c.carry_scale))
        )
        terms["place"] = c.place_weight * at_goal * (1.0 - (self.lift() / c.lift_height).clamp(0.0, 1.0))
        return terms

    def _success(self) -> torch.Tensor:
        c = self.cfg
        return (self.goal_distance() < c.goal_radius) & (self.lift() <= c.rest_tolerance) & self.released()

    def _terminated(self) -> torch.Tensor:
        terminated = super()._terminated()
        return terminated | self._success() if self.cfg.terminate_on_success else terminated


POLICY = Columns(SO101PickPlaceTask.observation_names["policy"])
"""The ``policy`` group's columns by name."""


def pick_place_expert(cfg: SO101PickPlaceCfg | None = None) -> SO101PickPlaceExpert:
    """The task's scripted expert (:mod:`rslkit.envs.tasks.so101_pick_place_expert`) for ``cfg`` (default the
    task's)."""
    return SO101PickPlaceExpert(cfg or SO101PickPlaceCfg(), POLICY.names, CUBE_HALF_SIZE)


def pick_place_distance(cfg: SO101PickPlaceCfg | None = None) -> GoalDistance:
    """The task's success test on one observation (metres, 0 once placed): the cube's horizontal distance beyond
    ``goal_radius`` plus its height above the goal, plus, until then, pads to cube."""
    radius = (cfg or SO101PickPlaceCfg()).goal_radius
    cube, goal, pads = POLICY["cube.*"], POLICY["goal.*"], POLICY["grasp_point.*"]

    def distance(obs: Observation) -> float:
        x = np.asarray(obs["policy"], dtype=np.float64)
        lacking = max(float(np.linalg.norm(x[cube[:2]] - x[goal[:2]])) - radius, 0.0)
        lacking += max(float(x[cube[2]] - x[goal[2]]), 0.0)
        return lacking + float(np.linalg.norm(x[cube] - x[pads])) if lacking > 0.005 else 0.0

    return distance


def _make(cfg: SO101PickPlaceCfg, device: str) -> SO101PickPlaceTask:
    return SO101PickPlaceTask(cfg, device)


TASK = TaskSpec(
    name="so101-pick-place",
    env_cfg=lambda: SO101PickPlaceCfg(num_envs=512),
    make_env=_make,
    description="SO-101 arm placing a cube at one of 4 goals named in a language instruction (MuJoCo)",
    expert=pick_place_expert,
    goal_distance=pick_place_distance,
)
