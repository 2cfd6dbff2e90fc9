"""Scripted expert of ``so101-pick-place`` (``TaskSpec.expert`` of :mod:`rslkit.envs.tasks.so101_pick_place`): the
lift expert's grasp, then carry, lower, release and retreat.

Stateless like the other experts (:mod:`rslkit.envs.expert`): the phase follows from the observation, whose
``policy`` group is the lift task's columns and the goal position (``goal.x``, ``goal.y``, ``goal.z``), read by
name. Until the cube is held, :class:`~rslkit.envs.tasks.so101_lift_expert.SO101LiftExpert` acts unchanged (rise,
approach, close); once held, the cube is carried level (along a straight line, rate-limited) at ``carry_height`` to
above the goal, lowered to the floor there and released; the open gripper slides the fixed jaw off the cube where it
still leans on it, then rises straight up and stays. The wrist roll keeps its command from the grasp throughout. A
cube that lands off the goal is grasped again. Measured: 128 of 128 episodes (32 per goal), placed after 60 steps
(median; at most 66), ~2.5 ms per env and step on one CPU core; with Gaussian action noise 0.02
(``python -m rslkit.record --expert --action_noise 0.02``) 64 of 64, with 0.05 about 40 % (the lift expert: about
55 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rslkit.envs.expert import Observation, batched
from rslkit.envs.tasks.so101_lift_expert import SO101LiftExpert, SO101LiftExpertCfg


@dataclass
class SO101PickPlaceExpertCfg:
    """Way points and tolerances of the scripted place (metres), after the lift expert's grasp."""

    carry_height: float = 0.04
    """Carry the cube this high above its resting height (its bottom clears the floor by this much)."""
    up_below: float = 0.01
    """A held cube lower than this (above its resting height) and away from the goal is first lifted straight up."""
    lower_within: float = 0.015
    """Lower the cube once its centre is this close to the goal horizontally, ..."""
    keep_lowering_within: float = 0.025
    """... and keep lowering while within this (rise and re-aim beyond it)."""
    press: float = 0.003
    """Lower the pads this far below the cube's resting height, so the cube surely reaches the floor."""
    carry_step: float = 0.025
    """The carry aims this far (metres) ahead of the cube along the straight line to the goal, so the cube moves
    level instead of swinging along the joint-space path."""
    place_within: float = 0.015
    """Release a held cube within this of the goal (inside the task's ``goal_radius``, 0.03) ..."""
    release_below: float = 0.01
    """... once it is at most this far above its resting height (a cube tilted in the grasp touches the floor with an
    edge up to 8 mm high; released, it falls flat)."""
    back_off: float = 0.01
    """A released cube still touching the fixed jaw: the pads aim this far (horizontally) past the cube's centre
    (moving the fixed jaw away from the cube's face)."""
    retreat_height: float = 0.1
    """After the release, the open pads rise to this height above the cube's centre."""
    rate: float = 0.05
    """While the cube is held or just released, each arm action moves at most this far from the last one (action
    units per step), so it neither slips out of a swing nor is knocked over."""


class SO101PickPlaceExpert:
    """Grasp the cube as :class:`SO101LiftExpert` does, then place it at the goal.

    Args:
        task_cfg: the task's config (``goal_radius`` and the lift task's fields).
        names: the ``policy`` group's column names (the lift task's, then ``goal.x``, ``goal.y``, ``goal.z``).
        cube_half_size: half edge of the cube (metres).
        expert_cfg: the place's way points.
        lift_cfg: the grasp's thresholds (the lift expert's).
    """

    def __init__(
        self,
        task_cfg: Any,
        names: Sequence[str],
        cube_half_size: float,
        expert_cfg: SO101PickPlaceExpertCfg | None = None,
        lift_cfg: SO101LiftExpertCfg | None = None,
    ) -> None:
        self.task_cfg = task_cfg
        self.cfg = expert_cfg or SO101PickPlaceExpertCfg()
        self.lift = SO101LiftExpert(task_cfg, names, cube_half_size, lift_cfg)
        self.goal = self.lift.columns["goal.*"]
        self._call = batched(self._one)

    def phase(self, obs: np.ndarray) -> tuple[str, np.ndarray | None]:
        """``(phase, target of the pads' midpoint)`` for one observation. Phases: the lift expert's ``rise``,
        ``approach`` and ``close`` (target None: it acts), then ``up`` (held, low and away from the goal: straight
        up first), ``carry`` (to ``carry_height`` above the goal), ``lower`` (onto the goal), ``release`` (open, arm
        still until the moving jaw is off the cube), ``back_off`` (open, the fixed jaw slides off the cube) and
        ``retreat`` (open, straight up)."""
        self.lift.columns.check(obs.shape[-1], "The so101-pick-place expert")
        c, lift = self.cfg, self.lift
        pads, cube, goal = obs[lift.pads], obs[lift.cube], obs[self.goal]
        touch, last_grip = obs[lift.touch], obs[lift.last_grip]
        height = cube[2] - lift.cube_half_size
        to_goal = np.linalg.norm(cube[:2] - goal[:2])
        if height < c.release_below and to_goal < self.task_cfg.goal_radius:  # placed, or about to be released
            if last_grip > 0:  # released: the arm stays until the moving jaw is off the cube, ...
                if touch[1] > 0:
                    return "release", None
                if touch[0] > 0:  # ... slides the fixed jaw off a cube leaning on it, then rises straight up
                    # it lies between the fixed jaw and the midpoint of the open pads: move the pads towards it
                    away = (cube[:2] - pads[:2]) / max(float(np.linalg.norm(cube[:2] - pads[:2])), 1e-6)
                    return "back_off", np.array([*(pads[:2] + c.back_off * away), pads[2]])
                return "retreat", np.array([pads[0], pads[1], cube[2] + c.retreat_height])
            if to_goal < c.place_within:
                return "release", None
        lift_phase, _ = lift.phase(obs)
        if lift_phase != "carry":
            return lift_phase, None
        offset = pads[:2] - cube[:2]  # where the cube hangs from the pads
        if to_goal < c.lower_within or (to_goal < c.keep_lowering_within and height < 0.5 * c.carry_height):
            return "lower", np.array([*(goal[:2] + offset), pads[2] - height - c.press])
        if height < c.up_below and to_goal > c.keep_lowering_within:
            return "up", np.array([pads[0], pads[1], pads[2] - height + c.carry_height])
        step = (goal[:2] - cube[:2]) * min(1.0, c.carry_step / to_goal)
        return "carry", np.array([*(cube[:2] + step + offset), pads[2] - height + c.carry_height])

    def _one(self, obs: np.ndarray) -> np.ndarray:
        phase, target = self.phase(obs)
        if target is None and phase != "release":
            return self.lift._one(obs)
        last_arm = obs[self.lift.last_arm]
        if phase == "release":
            return np.append(last_arm, 1.0)
        assert target is not None
        grip = 1.0 if phase in ("back_off", "retreat") else -1.0
        lift = self.lift
        q = lift.kin.joints(obs[lift.joints])  # the gripper where it is (on the cube): it moves the pads by ~2 cm
        # Pointing down, the wrist roll only turns the cube about the vertical: it keeps its command from the grasp
        # (a cube tilted in the jaws has no clean yaw to align with), the other four joints place the pads.
        down = np.array([0.0, 0.0, -1.0])
        q_goal = lift.kin.solve(q, target, 4, down, None, lift.cfg.orientation_weight, tolerance=0.01)
        arm = lift.kin.action(lift.kin.hold(q_goal)[:5])
        arm = last_arm + np.clip(arm - last_arm, -self.cfg.rate, self.cfg.rate)
        arm[4] = last_arm[4]
        return np.append(arm, grip)

    def __call__(self, obs: Observation) -> np.ndarray:
        """Actions ``[..., 6]`` for observation groups whose ``policy`` is ``[..., 36]``."""
        return self._call(obs)
