"""Scripted expert of ``so101-lift`` (``TaskSpec.expert`` of :mod:`rslkit.envs.tasks.so101_lift`).

Jaws open, pointing down and aligned with the cube's faces, the pads approach the cube along a funnel (the better
aligned, the lower); they close on it, then carry it, rate-limited, to a fixed point 7 cm up. The phase follows from
the observation: pads to cube, the contact flags and the last gripper command (:meth:`SO101LiftExpert.phase`).
Inverse kinematics restarts from fixed poses where it ends in a local minimum, so the expert also recovers from
states a bad policy left (measured: 99 of 100). Stateless (:mod:`rslkit.envs.expert`); it reads the observation by
column name, so a task whose ``policy`` group extends the lift task's (``so101-pick-place``) can use it as is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rslkit.envs.columns import Columns
from rslkit.envs.expert import Observation, batched
from rslkit.envs.tasks.arm_kinematics import ArmKinematics


@dataclass
class SO101LiftExpertCfg:
    """Thresholds and way points of the scripted lift (metres)."""

    hover: float = 0.05
    """Approach the cube from this high above it."""
    funnel: float = 3.0
    """Descend along a funnel: the pads aim ``funnel * (horizontal error - align_xy)`` above the cube (at most
    ``hover``), so they reach its centre once aligned, and rise again if pushed off."""
    align_xy: float = 0.005
    """Horizontal error (metres) at which the funnel reaches the cube's centre."""
    rise_below: float = 0.02
    """Pads this far below the funnel and not above the cube rise straight up first (they would hit it)."""
    close_at: float = 0.01
    """Close the gripper once the pads' midpoint is this close to the cube's centre."""
    regrasp_at: float = 0.03
    """A closed gripper without both jaws on the cube farther than this from it opens again."""
    lift_point: tuple[float, float, float] = (0.21, 0.0, 0.09)
    """Where the pads carry a grasped cube (reachable pointing down; the cube is then ~7 cm up, 5 cm counts)."""
    carry_rate: float = 0.03
    """While carrying, each arm action moves at most this far from the last one (action units per step), so the
    cube does not slip out of a fast swing."""
    orientation_weight: float = 0.02
    """IK weight of the pointing and closing axes (metres per unit of axis error)."""


class SO101LiftExpert:
    """Reach, grasp and lift the cube, pointing the gripper down (see the module docstring).

    Args:
        task_cfg: the task's config (``gripper_open``, ``gripper_closed``).
        names: the ``policy`` group's column names (the task's ``observation_names["policy"]``); the joints are
            the ``<joint>.pos_normalized`` columns, in action order (arm, then gripper).
        cube_half_size: half edge of the cube (metres): its centre's height when it rests on the floor.
        expert_cfg: the lift's thresholds and way points.
    """

    def __init__(
        self, task_cfg: Any, names: Sequence[str], cube_half_size: float, expert_cfg: SO101LiftExpertCfg | None = None
    ) -> None:
        from rslkit.envs.mujoco.models import SO101_EE_SITE, SO101_JAW_TIPS, load_so101_lift

        self.task_cfg, self.cfg, self.cube_half_size = task_cfg, expert_cfg or SO101LiftExpertCfg(), cube_half_size
        self.columns = cols = Columns(names)
        joints = [n.removesuffix(".pos_normalized") for n in names if n.endswith(".pos_normalized")]
        self.kin = ArmKinematics(load_so101_lift(), joints, SO101_JAW_TIPS, SO101_EE_SITE)
        self.joints, self.pads, self.cube = cols["*.pos_normalized"], cols["grasp_point.*"], cols["cube.*"]
        self.quat, self.touch = cols["cube_quat.*"], cols["touch.*"]
        self.last_arm = np.array([cols.one(f"last_action.{j}") for j in joints[:-1]])
        self.last_grip = cols.one(f"last_action.{joints[-1]}")
        self._call = batched(self._one)

    def _one(self, obs: np.ndarray) -> np.ndarray:
        self.columns.check(obs.shape[-1], "The so101-lift expert")
        c = self.cfg
        phase, target = self.phase(obs)
        grip = 1.0 if phase in ("rise", "approach") else -1.0
        q = self.kin.joints(obs[self.joints])
        q[5] = self.task_cfg.gripper_open if grip > 0 else self.task_cfg.gripper_closed
        down, closing = np.array([0.0, 0.0, -1.0]), self._closing_axis(obs[self.quat], target)
        q_goal = self.kin.solve(q, target, 5, down, closing, c.orientation_weight, tolerance=0.01)
        arm = self.kin.action(self.kin.hold(q_goal)[:5])
        if phase == "carry":  # limit the rate, from the last command (in the observation)
            last = obs[self.last_arm]
            arm = last + np.clip(arm - last, -c.carry_rate, c.carry_rate)
        return np.append(arm, grip)

    def phase(self, obs: np.ndarray) -> tuple[str, np.ndarray]:
        """``(phase, target of the pads' midpoint)`` for one observation; phases: ``rise`` (open, up first when low
        beside the cube), ``approach`` (open, along the funnel), ``close`` (at the cube) and ``carry`` (held, to
        ``lift_point``)."""
        c, half = self.cfg, self.cube_half_size
        pads, cube, touch, last_grip = obs[self.pads], obs[self.cube], obs[self.touch], obs[self.last_grip]
        dist, dist_xy = np.linalg.norm(cube - pads), np.linalg.norm(cube[:2] - pads[:2])
        closing, lifted = last_grip <= 0, cube[2] > half + 0.01
        if closing and (touch.min() > 0 or (lifted and (touch.max() > 0 or dist < c.regrasp_at))):
            return "carry", np.asarray(c.lift_point)  # held (a contact may flicker while it is up)
        if (closing and dist < c.regrasp_at) or dist < c.close_at:
            return "close", cube
        height = float(np.clip(c.funnel * (dist_xy - c.align_xy), 0.0, c.hover))
        if pads[2] < cube[2] + height - c.rise_below and dist_xy > 2 * half:
            return "rise", np.array([pads[0], pads[1], cube[2] + c.hover])  # beside the cube, too low: up first
        return "approach", cube + np.array([0.0, 0.0, height])

    @staticmethod
    def _closing_axis(quat: np.ndarray, target: np.ndarray) -> np.ndarray:
        """The cube face normal (horizontal) nearest the radial direction, so the wrist turns least."""
        w, x, y, z = quat
        yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        radial = math.atan2(target[1], target[0])
        k = round((radial - yaw) / (math.pi / 2))
        angle = yaw + k * math.pi / 2
        return np.array([math.cos(angle), math.sin(angle), 0.0])

    def __call__(self, obs: Observation) -> np.ndarray:
        return self._call(obs)
