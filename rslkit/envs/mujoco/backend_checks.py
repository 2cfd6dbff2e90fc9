"""The interface of the physics backends (C MuJoCo and MuJoCo Warp) and what they share: sizes, input checks,
joint-state resets, state copies and model lookups."""

from __future__ import annotations

from abc import ABC, abstractmethod

import mujoco
import numpy as np
import torch


class PhysicsBackend(ABC):
    """What a MuJoCo task may use of its backend (:class:`~rslkit.envs.mujoco.backend.MujocoBackend`,
    :class:`~rslkit.envs.mujoco.warp_backend.WarpBackend`), and what the two share.

    ``qpos [N, nq]``, ``qvel [N, nv]``, ``ctrl [N, nu]`` and ``state [N, nstate]`` are writable tensors (float64 on
    the CPU for ``mujoco``, float32 on the backend's device for ``warp``): tasks cast what they read with
    ``.to(device, torch.float32)`` and write with ``.to(backend.qpos)``.
    """

    model: mujoco.MjModel
    num_envs: int
    qpos: torch.Tensor
    qvel: torch.Tensor
    ctrl: torch.Tensor

    @property
    def nq(self) -> int:
        """Number of position coordinates."""
        return self.model.nq

    @property
    def nv(self) -> int:
        """Number of degrees of freedom."""
        return self.model.nv

    @property
    def nu(self) -> int:
        """Number of actuators."""
        return self.model.nu

    @staticmethod
    def _check_sizes(num_envs: int, decimation: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        if decimation < 1:
            raise ValueError(f"decimation must be >= 1 physics substep per control step, got {decimation}.")

    @property
    @abstractmethod
    def state(self) -> torch.Tensor:
        """``mjSTATE_INTEGRATION`` rows ``[N, nstate]`` (C MuJoCo's layout in both backends), writable."""

    @abstractmethod
    def step(self, ctrl: torch.Tensor) -> None:
        """Set controls ``[N, nu]`` and advance every env by ``decimation`` substeps."""

    @abstractmethod
    def forward(self, env_ids: torch.Tensor | None = None) -> None:
        """Recompute derived fields (``xpos``, sensors) of ``env_ids`` (all if None) after writing their state."""

    @abstractmethod
    def reset(self, env_ids: torch.Tensor | None = None, forward: bool = True) -> None:
        """Reset ``env_ids`` (all if None) to the model defaults (``qpos0``, zero velocity, controls, warm start)."""

    @abstractmethod
    def xpos(self) -> torch.Tensor:
        """Body positions in the world frame ``[N, nbody, 3]`` (a copy)."""

    @abstractmethod
    def site_xpos(self) -> torch.Tensor:
        """Site positions in the world frame ``[N, nsite, 3]`` (a copy)."""

    @abstractmethod
    def sensordata(self) -> torch.Tensor:
        """All sensor values ``[N, nsensordata]`` (a copy); slice one with :meth:`sensor_slice`."""

    @abstractmethod
    def close(self) -> None:
        """Release the simulations."""

    def set_joint_state(
        self,
        env_ids: torch.Tensor,
        qpos: torch.Tensor,
        qvel: torch.Tensor | None = None,
        ctrl: torch.Tensor | None = None,
    ) -> None:
        """Reset ``env_ids`` ``[K]`` to ``qpos [K, nq]`` (and ``qvel [K, nv]``, ``ctrl [K, nu]``; zero if None)."""
        ids = env_ids.to(self.qpos.device)
        self.reset(ids, forward=False)
        self.qpos[ids] = qpos.to(self.qpos)
        if qvel is not None:
            self.qvel[ids] = qvel.to(self.qvel)
        if ctrl is not None:
            self.ctrl[ids] = ctrl.to(self.ctrl)
        self.forward(ids)

    def sensor_slice(self, name: str) -> slice:
        """Columns of sensor ``name`` in :meth:`sensordata`."""
        return sensor_columns(self.model, name)

    def get_state(self) -> torch.Tensor:
        """Copy of the full integration state ``[N, nstate]`` (``mjSTATE_INTEGRATION`` rows, warm start included).

        The layout is C MuJoCo's, so states move between the ``mujoco`` and ``warp`` backends (cast to float64 /
        float32 on the way).
        """
        return self.state.clone()

    def set_state(self, state: torch.Tensor) -> None:
        """Restore rows saved by :meth:`get_state` (of either backend) and recompute derived fields."""
        rows = self.state
        if tuple(state.shape) != tuple(rows.shape):
            raise ValueError(
                f"Saved MuJoCo state has shape {list(state.shape)}, this backend {list(rows.shape)}; resume "
                "with the same model and num_envs."
            )
        rows.copy_(state)
        self.forward()

    def _check_ctrl(self, ctrl: torch.Tensor) -> None:
        """Refuse controls of the wrong shape or with non-finite entries before any env is stepped.

        Raises:
            ValueError: for a wrong shape, or non-finite controls (naming up to 20 env indices).
        """
        expected = (self.num_envs, self.nu)
        if tuple(ctrl.shape) != expected:
            raise ValueError(
                f"{type(self).__name__}.step expects controls of shape {list(expected)}, got {list(ctrl.shape)}."
            )
        finite = torch.isfinite(ctrl).all(dim=-1)
        if not bool(finite.all()):
            bad = (~finite).nonzero().squeeze(-1).tolist()
            raise ValueError(
                f"Non-finite controls for env indices {bad[:20]}{' ...' if len(bad) > 20 else ''}; no env was "
                "stepped. Check the policy or task for NaN/inf before calling step."
            )


def sensor_columns(model: mujoco.MjModel, name: str) -> slice:
    """Columns of sensor ``name`` in ``sensordata``.

    Raises:
        ValueError: the model has no such sensor.
    """
    sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
    if sid < 0:
        raise ValueError(f"Model has no sensor '{name}'; add one with mujoco.MjSpec.add_sensor before compiling.")
    adr = int(model.sensor_adr[sid])
    return slice(adr, adr + int(model.sensor_dim[sid]))


def acc_sensor_columns(model: mujoco.MjModel) -> np.ndarray:
    """Columns of ``sensordata`` that MuJoCo computes in the acceleration stage (contact, actuator force, touch, ...).

    Only a physics step computes them; ``mj_fwdPosition`` / ``mj_fwdVelocity`` (a backend's ``forward``) leave them
    as they were.
    """
    acc = int(mujoco.mjtStage.mjSTAGE_ACC)
    cols = [
        c
        for s in range(model.nsensor)
        if int(model.sensor_needstage[s]) == acc
        for c in range(int(model.sensor_adr[s]), int(model.sensor_adr[s]) + int(model.sensor_dim[s]))
    ]
    return np.asarray(cols, dtype=np.int64)
