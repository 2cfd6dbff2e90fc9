"""Forward and inverse kinematics of an arm in a MuJoCo model (float64, one env at a time): what the SO-101 tasks'
scripted experts (:mod:`rslkit.envs.expert`) steer with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


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
