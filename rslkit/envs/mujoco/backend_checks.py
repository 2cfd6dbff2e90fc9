"""Input checks, model sizes and model lookups shared by the physics backends (C MuJoCo and MuJoCo Warp)."""

from __future__ import annotations

import mujoco
import numpy as np
import torch


class ModelSizes:
    """``nq``, ``nv``, ``nu`` of the backend's compiled ``model`` (``mujoco.MjModel``)."""

    model: mujoco.MjModel

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


def check_controls(ctrl: torch.Tensor, num_envs: int, nu: int, owner: str) -> None:
    """Refuse controls of the wrong shape or with non-finite entries before any env is stepped.

    Args:
        ctrl: controls ``[num_envs, nu]``.
        owner: the backend's name, for the message.

    Raises:
        ValueError: for a wrong shape, or non-finite controls (naming up to 20 env indices).
    """
    expected = (num_envs, nu)
    if tuple(ctrl.shape) != expected:
        raise ValueError(f"{owner}.step expects controls of shape {list(expected)}, got {list(ctrl.shape)}.")
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
