"""Scripted experts, one per task, from observations alone: the stand-in "human" and the demonstrator.

An expert maps observation groups ``{"policy": [..., D]}`` (numpy, with or without a batch dimension) to actions
``[..., A]`` in ``[-1, 1]``. Each is stateless, so it can take over in any state (a corridor trigger mid-episode):
what it must remember it reads back from the observation (the SO-101 tasks observe their last action).

- ``pendulum``: :func:`rslkit.data.pendulum_expert.pendulum_expert` (energy pumping, then PD balance).
- ``so101-reach``: damped least-squares inverse kinematics of the gripper frame onto the target, with gravity
  compensation (the position servos sag under load by ``gravity torque / kp``).
- ``so101-lift``: jaws open, pointing down and aligned with the cube's faces, the pads approach the cube along a
  funnel (the better aligned, the lower); they close on it, then carry it, rate-limited, to a fixed point 7 cm up.
  The phase follows from the observation: pads to cube, the contact flags and the last gripper command
  (:meth:`SO101LiftExpert.phase`). Inverse kinematics restarts from fixed poses where it ends in a local minimum,
  so the expert also recovers from states a bad policy left (measured: 99 of 100).
- ``so101-pick-place``: the lift expert's grasp, then carry, lower, release at the instructed goal
  (:mod:`rslkit.realworld.experts_pick_place`).

:func:`expert_for` gives one by task name; :func:`scripted_human_for` wraps it in a
:class:`~rslkit.realworld.interventions.ScriptedHuman` with the task's distance to the goal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rslkit.data.pendulum_expert import pendulum_expert
from rslkit.envs.tasks.so101_lift import CUBE_HALF_SIZE
from rslkit.realworld.interventions import Expert, Observation, ScriptedHuman


def _batched(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Observation], np.ndarray]:
    """Apply a one-env ``[D] -> [A]`` function to group ``policy`` of shape ``[D]`` or ``[N, D]``."""

    def expert(obs: Observation) -> np.ndarray:
        x = np.asarray(obs["policy"], dtype=np.float64)
        if x.ndim == 1:
            return fn(x).astype(np.float32)
        return np.stack([fn(row) for row in x.reshape(-1, x.shape[-1])]).reshape(*x.shape[:-1], -1).astype(np.float32)

    return expert


def pendulum(obs: Observation) -> np.ndarray:
    """``pendulum``: :func:`~rslkit.data.pendulum_expert.pendulum_expert` on numpy observations ``[..., 3]``."""
    x = np.asarray(obs["policy"], dtype=np.float32)
    action = pendulum_expert(torch.from_numpy(x.reshape(-1, 3))).numpy()
    return action.reshape(*x.shape[:-1], 1)


# ---------------------------------------------------------------------------------------------------- kinematics
class ArmKinematics:
    """Forward and inverse kinematics of named joints of a MuJoCo model, on a private ``MjData`` (float64).

    Args:
        model: the task's model.
        joints: the joints the actions command, in action order; each is driven by a position actuator of that name.
        point_sites: the IK point is the mean of these sites.
        frame_site: the site whose x axis (pointing) and z axis (closing) orientation targets refer to.
    """

    def __init__(self, model: Any, joints: Sequence[str], point_sites: Sequence[str], frame_site: str) -> None:
        import mujoco

        self._mj, self.model, self.data = mujoco, model, mujoco.MjData(model)
        ids = [model.joint(j).id for j in joints]
        self.qadr = np.array([model.jnt_qposadr[i] for i in ids])
        self.dadr = np.array([model.jnt_dofadr[i] for i in ids])
        act = [model.actuator(j).id for j in joints]
        low, high = model.actuator_ctrlrange[act, 0], model.actuator_ctrlrange[act, 1]
        self.low, self.high, self.mid, self.half = low, high, 0.5 * (low + high), 0.5 * (high - low)
        self.kp = model.actuator_gainprm[act, 0].copy()
        self.sites = [model.site(s).id for s in point_sites]
        self.frame = model.site(frame_site).id

    def joints(self, q_norm: np.ndarray) -> np.ndarray:
        """Joint positions (rad) from positions normalized to ``[-1, 1]`` by the control ranges."""
        return self.mid[: len(q_norm)] + q_norm * self.half[: len(q_norm)]

    def action(self, q: np.ndarray) -> np.ndarray:
        """Absolute position targets ``q`` as actions in ``[-1, 1]``."""
        return np.clip((q - self.mid[: len(q)]) / self.half[: len(q)], -1.0, 1.0)

    def _set(self, q: np.ndarray) -> None:
        self.data.qpos[self.qadr[: len(q)]] = q
        self._mj.mj_kinematics(self.model, self.data)
        self._mj.mj_comPos(self.model, self.data)

    def point(self, q: np.ndarray) -> np.ndarray:
        """The IK point (world frame) at joint positions ``q``."""
        self._set(q)
        return self.data.site_xpos[self.sites].mean(0)

    def _residual(self, q, n, target, pointing, closing, weight) -> tuple[np.ndarray, np.ndarray]:
        """Residual and its Jacobian over the first ``n`` joints (point, then weighted axis errors)."""
        mj, m, d = self._mj, self.model, self.data
        self._set(q)
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        jp = np.zeros((3, n))
        for s in self.sites:
            mj.mj_jacSite(m, d, jacp, None, s)
            jp += jacp[:, self.dadr[:n]] / len(self.sites)
        res, jac = [d.site_xpos[self.sites].mean(0) - target], [jp]
        if pointing is not None or closing is not None:
            mj.mj_jacSite(m, d, None, jacr, self.frame)
            jr = jacr[:, self.dadr[:n]]
            xmat = d.site_xmat[self.frame].reshape(3, 3)
            for column, goal in ((0, pointing), (2, closing)):
                if goal is not None:
                    axis = xmat[:, column]  # d(axis)/dq = omega x axis = -[axis]_x J_rot
                    skew = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
                    res.append(weight * (axis - goal))
                    jac.append(-weight * skew @ jr)
        return np.concatenate(res), np.concatenate(jac)

    def solve(
        self,
        q: np.ndarray,
        target: np.ndarray,
        n: int,
        pointing: np.ndarray | None = None,
        closing: np.ndarray | None = None,
        weight: float = 0.02,
        tolerance: float = 1e-3,
    ) -> np.ndarray:
        """Joint positions that put the IK point at ``target`` (and the frame's x / z axes along ``pointing`` /
        ``closing``, errors weighted by ``weight`` metres per unit), moving only the first ``n`` joints.

        Damped least squares from ``q``, clipped to the control ranges; where that ends farther than ``tolerance``
        (a local minimum at a joint limit), also from the fixed :attr:`RESTARTS` poses, keeping the best.
        """
        best, best_err = q, np.inf
        for start in (q, *self._restarts(q, n)):
            q_end = self._descend(start, target, n, pointing, closing, weight)
            err = float(np.linalg.norm(self._residual(q_end, n, target, pointing, closing, weight)[0]))
            if err < best_err:
                best, best_err = q_end, err
            if best_err < tolerance:
                break
        return best

    RESTARTS = (
        (0, 0, 0, 0, 0),
        (0, -0.5, 0.5, 0.5, 0),
        (0, 0, 0.3, 0.7, 0),
        (0.5, -0.3, 0.3, 0.3, 0),
        (-0.5, -0.3, 0.3, 0.3, 0),
    )
    """IK starts (normalized positions of the first five joints): home, folded up, reaching down, left, right."""

    def _restarts(self, q: np.ndarray, n: int) -> list[np.ndarray]:
        out = []
        for pose in self.RESTARTS:
            start = q.copy()
            start[:n] = self.joints(np.asarray(pose[:n], dtype=np.float64))
            out.append(start)
        return out

    def _descend(self, q, target, n, pointing, closing, weight, iters: int = 30, damping: float = 1e-4):
        q = q.copy()
        for _ in range(iters):
            r, jac = self._residual(q, n, target, pointing, closing, weight)
            step = -np.linalg.solve(jac.T @ jac + damping * np.eye(n), jac.T @ r)
            q[:n] = np.clip(q[:n] + step, self.low[:n], self.high[:n])
            if np.abs(step).max() < 1e-5:
                break
        return q

    def hold(self, q: np.ndarray) -> np.ndarray:
        """Position targets at which the servos hold ``q`` still: ``q + gravity torque / kp``."""
        self.data.qpos[self.qadr[: len(q)]] = q
        self.data.qvel[:] = 0.0
        self._mj.mj_forward(self.model, self.data)
        return q + self.data.qfrc_bias[self.dadr[: len(q)]] / self.kp[: len(q)]


# ---------------------------------------------------------------------------------------------------- so101-reach
class SO101ReachExpert:
    """``so101-reach`` (``action_mode="absolute"``): joint targets that put the gripper frame on the target.

    Observation layout (see :class:`~rslkit.envs.tasks.so101_reach.SO101ReachTask`): normalized joints 0-4, target
    13-15.
    """

    def __init__(self, cfg: Any = None) -> None:
        from rslkit.envs.mujoco.models import SO101_EE_SITE, load_so101
        from rslkit.envs.tasks.so101_reach import ARM_JOINTS

        if cfg is not None and getattr(cfg, "action_mode", "absolute") != "absolute":
            raise ValueError("The so101-reach expert commands absolute joint targets: use action_mode='absolute'.")
        self.kin = ArmKinematics(load_so101(), ARM_JOINTS, [SO101_EE_SITE], SO101_EE_SITE)
        self._call = _batched(self._one)

    def _one(self, obs: np.ndarray) -> np.ndarray:
        q_goal = self.kin.solve(self.kin.joints(obs[0:5]), obs[13:16], n=5)
        return self.kin.action(self.kin.hold(q_goal))

    def __call__(self, obs: Observation) -> np.ndarray:
        return self._call(obs)


# ---------------------------------------------------------------------------------------------------- so101-lift
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
    """``so101-lift``: reach, grasp and lift the cube, pointing the gripper down (see the module docstring).

    Observation layout (see :class:`~rslkit.envs.tasks.so101_lift.SO101LiftTask`): normalized joints 0-5, pad
    midpoint 12-14, cube 15-17, cube quaternion 21-24 (w, x, y, z), jaw contacts 25-26, last action 27-32.
    """

    def __init__(self, cfg: Any = None, expert_cfg: SO101LiftExpertCfg | None = None) -> None:
        from rslkit.envs.mujoco.models import SO101_EE_SITE, SO101_JAW_TIPS, load_so101_lift
        from rslkit.envs.tasks.so101_lift import ARM_JOINTS, GRIPPER, SO101LiftCfg

        self.task_cfg = cfg or SO101LiftCfg()
        self.cfg = expert_cfg or SO101LiftExpertCfg()
        self.kin = ArmKinematics(load_so101_lift(), (*ARM_JOINTS, GRIPPER), SO101_JAW_TIPS, SO101_EE_SITE)
        self._call = _batched(self._one)

    def _one(self, obs: np.ndarray) -> np.ndarray:
        c = self.cfg
        phase, target = self.phase(obs)
        grip = 1.0 if phase in ("rise", "approach") else -1.0
        q = self.kin.joints(obs[0:6])
        q[5] = self.task_cfg.gripper_open if grip > 0 else self.task_cfg.gripper_closed
        down, closing = np.array([0.0, 0.0, -1.0]), self._closing_axis(obs[21:25], target)
        q_goal = self.kin.solve(q, target, 5, down, closing, c.orientation_weight, tolerance=0.01)
        arm = self.kin.action(self.kin.hold(q_goal)[:5])
        if phase == "carry":  # limit the rate, from the last command (in the observation)
            arm = obs[27:32] + np.clip(arm - obs[27:32], -c.carry_rate, c.carry_rate)
        return np.append(arm, grip)

    def phase(self, obs: np.ndarray) -> tuple[str, np.ndarray]:
        """``(phase, target of the pads' midpoint)`` for one observation ``[33]``; phases: ``rise`` (open, up
        first when low beside the cube), ``approach`` (open, along the funnel), ``close`` (at the cube) and
        ``carry`` (held, to ``lift_point``)."""
        c = self.cfg
        pads, cube, touch, last_grip = obs[12:15], obs[15:18], obs[25:27], obs[32]
        dist, dist_xy = np.linalg.norm(cube - pads), np.linalg.norm(cube[:2] - pads[:2])
        closing, lifted = last_grip <= 0, cube[2] > CUBE_HALF_SIZE + 0.01
        if closing and (touch.min() > 0 or (lifted and (touch.max() > 0 or dist < c.regrasp_at))):
            return "carry", np.asarray(c.lift_point)  # held (a contact may flicker while it is up)
        if (closing and dist < c.regrasp_at) or dist < c.close_at:
            return "close", cube
        height = float(np.clip(c.funnel * (dist_xy - c.align_xy), 0.0, c.hover))
        if pads[2] < cube[2] + height - c.rise_below and dist_xy > 2 * CUBE_HALF_SIZE:
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


# ---------------------------------------------------------------------------------------------------- by task
def _pick_place_expert(cfg: Any) -> Expert:
    from rslkit.realworld.experts_pick_place import SO101PickPlaceExpert  # it builds on this module

    return SO101PickPlaceExpert(cfg)


EXPERTS: dict[str, Callable[[Any], Expert]] = {
    "pendulum": lambda cfg: pendulum,
    "so101-reach": SO101ReachExpert,
    "so101-lift": SO101LiftExpert,
    "so101-pick-place": _pick_place_expert,
}
"""Task name -> ``(env_cfg or None) -> expert``."""


def expert_for(task: str, env_cfg: Any = None) -> Expert:
    """The scripted expert of ``task`` (for the env config ``env_cfg``, default the task's).

    Raises:
        ValueError: no expert for ``task``; the message lists the tasks that have one.
    """
    if task not in EXPERTS:
        raise ValueError(f"No scripted expert for task '{task}'; there are experts for {sorted(EXPERTS)}.")
    return EXPERTS[task](env_cfg)


def distance_for(task: str, env_cfg: Any = None) -> Callable[[Observation], float]:
    """Distance to the goal of one observation, 0 at the goal, for a scripted human's corridor and stall trigger.

    ``pendulum``: angle beyond 0.1 rad from upright (rad); ``so101-reach``: gripper frame to target beyond
    ``success_radius`` (m); ``so101-lift``: the height the cube lacks to success plus, until then, pads to cube (m);
    ``so101-pick-place``: :func:`~rslkit.realworld.experts_pick_place.pick_place_distance`.
    """
    if task == "pendulum":
        return lambda obs: max(abs(math.atan2(float(obs["policy"][1]), float(obs["policy"][0]))) - 0.1, 0.0)
    if task == "so101-reach":
        radius = getattr(env_cfg, "success_radius", 0.02)
        return lambda obs: max(float(np.linalg.norm(np.asarray(obs["policy"])[16:19])) - radius, 0.0)
    if task == "so101-lift":
        lift_height = getattr(env_cfg, "lift_height", 0.05)

        def lift_distance(obs: Observation) -> float:
            x = np.asarray(obs["policy"])
            lacking = max(CUBE_HALF_SIZE + lift_height - float(x[17]), 0.0)
            return lacking + float(np.linalg.norm(x[15:18] - x[12:15])) if lacking > 0 else 0.0

        return lift_distance
    if task == "so101-pick-place":
        from rslkit.realworld.experts_pick_place import pick_place_distance

        return pick_place_distance(env_cfg)
    raise ValueError(f"No distance to the goal for task '{task}'; there is one for {sorted(EXPERTS)}.")


def scripted_human_for(task: str, env_cfg: Any = None, **kwargs: Any) -> ScriptedHuman:
    """A :class:`~rslkit.realworld.interventions.ScriptedHuman` with ``task``'s expert and :func:`distance_for`;
    ``kwargs`` go to it (default triggers: no progress of 5 mm (or 5 mrad) for 15 steps; takeovers of 20 steps)."""
    expert = expert_for(task, env_cfg)
    options: dict[str, Any] = {"stall_steps": 15, "min_progress": 0.005, **kwargs}
    return ScriptedHuman(expert, distance=distance_for(task, env_cfg), **options)


def as_expert_observation(obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A VecEnv's observation TensorDict (or mapping of tensors) as the numpy groups experts take."""
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in obs.items()}
