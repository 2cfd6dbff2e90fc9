"""Batched C MuJoCo: ``num_envs`` copies of one ``MjModel`` stepped by ``mujoco.batch.Batch`` on a thread pool.

The state of every env lives in one float64 array of ``mjSTATE_INTEGRATION`` rows (``qpos``, ``qvel``, ``act``,
``ctrl``, warm start, ...) owned by MuJoCo; torch tensors here are zero-copy views of it, so controls go in and
state comes out as whole arrays with no per-env Python loop. Stepping is bit-identical to a loop of ``mj_step``
over one ``MjData`` per env (``tests/envs/test_mujoco_backend.py`` checks this).

``mujoco.batch.Batch`` (new in mujoco 4.0) is used rather than ``mujoco.rollout``: both run a persistent thread
pool, but Batch keeps the state rows (warm start included) between calls and computes position/velocity-dependent
fields (``xpos``, ``site_xpos``, ``sensordata``) at the *new* state (``stage=mjSTAGE_VEL``), where rollout's
sensors lag one substep behind and its state rows drop the warm start.

Acceleration-stage sensors (contact, actuator force, touch, ...) are computed only by a step (at its last substep,
as ``mj_step`` leaves them). A non-persistent Batch shares one ``MjData`` among the simulations a thread runs, so
after a ``reset``/``forward`` (position and velocity stages only) the copied-out ``sensordata`` would carry those
columns from whichever simulation that thread ran last: values that change with ``sim_threads`` and with the pool's
scheduling. The backend therefore keeps each env's own copy of them, as one ``MjData`` per env would: the last
step's values, zero after a reset (``mj_resetData``), unchanged by :meth:`MujocoBackend.forward`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import mujoco
import numpy as np
import torch
from mujoco import batch as mj_batch

from rslkit.envs.mujoco.backend_checks import PhysicsBackend, acc_sensor_columns

_STAGE_VEL = int(mujoco.mjtStage.mjSTAGE_VEL)
_STAGE_NONE = int(mujoco.mjtStage.mjSTAGE_NONE)


@dataclass
class MujocoBackendCfg:
    """Settings of the C MuJoCo backend."""

    sim_threads: int = 0
    """Threads of the stepping pool (0: all CPU cores)."""
    decimation: int = 10
    """Physics substeps (``mj_step`` calls) per control step."""


class MujocoBackend(PhysicsBackend):
    """``num_envs`` simulations of ``model``, stepped together.

    Tensors (float64, CPU; the task casts and moves them):

    - :attr:`qpos` ``[N, nq]``, :attr:`qvel` ``[N, nv]``, :attr:`ctrl` ``[N, nu]``, :attr:`state` ``[N, nstate]``:
      live views of MuJoCo's state rows; writes become the simulations' state (call :meth:`forward` after writing
      positions so that derived fields follow).
    - :meth:`xpos` ``[N, nbody, 3]``, :meth:`site_xpos` ``[N, nsite, 3]``, :meth:`sensordata` ``[N, nsensordata]``:
      copies of derived fields, current at the state after the last :meth:`step` / :meth:`forward`, except the
      acceleration-stage sensors: each env's values of its last step (zero after a reset; see the module docstring).
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, cfg: MujocoBackendCfg | None = None) -> None:
        cfg = cfg or MujocoBackendCfg()
        self._check_sizes(num_envs, cfg.decimation)
        if cfg.sim_threads < 0:
            raise ValueError(f"sim_threads must be >= 0 (0: all cores), got {cfg.sim_threads}.")
        self.cfg = cfg
        self.model = model
        self.num_envs = num_envs
        self.nthread = cfg.sim_threads or (os.cpu_count() or 1)
        self.batch = mj_batch.Batch(model, num_envs, nthread=self.nthread)
        # Bind derived outputs before the first call (a field bound later reads zero until the next call).
        self._xpos = self.batch.bind("xpos")
        self._site_xpos = self.batch.bind("site_xpos")
        self._sensordata = self.batch.bind("sensordata")
        self._acc_cols = acc_sensor_columns(model)
        self._acc_own = np.zeros((num_envs, self._acc_cols.size))
        """Each env's acceleration-stage sensor values (see the module docstring)."""
        self._state = torch.from_numpy(self.batch.state)
        self.qpos = torch.from_numpy(self.batch.bind("qpos"))
        self.qvel = torch.from_numpy(self.batch.bind("qvel"))
        self.ctrl = torch.from_numpy(self.batch.bind("ctrl"))
        self.reset()

    # ----------------------------------------------------------------- stepping
    def step(self, ctrl: torch.Tensor) -> None:
        """Set controls ``[N, nu]`` and advance every env by ``decimation`` substeps.

        Raises:
            ValueError: for a wrong shape, or non-finite controls (naming the env indices); no env is stepped then.
        """
        self._check_ctrl(ctrl)
        self.ctrl.copy_(ctrl)
        try:
            self.batch.step(nstep=self.cfg.decimation, stage=_STAGE_VEL)
        except mj_batch.SimulationError as err:
            self._keep_acc_sensors(np.setdiff1d(np.arange(self.num_envs), err.ids))  # the failed envs did not step
            raise _failure(err) from err
        self._keep_acc_sensors(None)

    def forward(self, env_ids: torch.Tensor | None = None) -> None:
        """Recompute derived fields (``xpos``, sensors) of ``env_ids`` (all if None) after writing their state."""
        ids = None if env_ids is None else env_ids.cpu().numpy().astype(np.int32)
        self._run(lambda: self.batch.forward(ids, stage=_STAGE_VEL))

    def reset(self, env_ids: torch.Tensor | None = None, forward: bool = True) -> None:
        """Reset ``env_ids`` (all if None) to the model defaults (``qpos0``, zero velocity, controls, warm start).

        With ``forward=False`` derived fields are left stale, for a caller that writes the state and then calls
        :meth:`forward`.
        """
        ids = None if env_ids is None else env_ids.cpu().numpy().astype(np.int32)
        stage = _STAGE_VEL if forward else _STAGE_NONE
        self._run(lambda: self.batch.reset(ids, stage=stage))
        self._acc_own[slice(None) if ids is None else ids] = 0.0

    # ----------------------------------------------------------------- derived fields
    def xpos(self) -> torch.Tensor:
        """Body positions in the world frame ``[N, nbody, 3]`` (a copy)."""
        return torch.from_numpy(self._xpos.copy())

    def site_xpos(self) -> torch.Tensor:
        """Site positions in the world frame ``[N, nsite, 3]`` (a copy)."""
        return torch.from_numpy(self._site_xpos.copy())

    def sensordata(self) -> torch.Tensor:
        """All sensor values ``[N, nsensordata]`` (a copy); slice one with :meth:`sensor_slice`.

        Acceleration-stage sensors hold each env's values of its last step (zero after a reset), never another
        env's: see the module docstring.
        """
        values = self._sensordata.copy()
        values[:, self._acc_cols] = self._acc_own
        return torch.from_numpy(values)

    @property
    def state(self) -> torch.Tensor:
        """MuJoCo's ``mjSTATE_INTEGRATION`` rows ``[N, nstate]`` (a live view: writes become the simulations')."""
        return self._state

    def close(self) -> None:
        """Release the thread pool and buffers."""
        self.batch = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- helpers
    def _keep_acc_sensors(self, ids: np.ndarray | None) -> None:
        """Remember the acceleration-stage sensors that the last step computed for ``ids`` (all if None)."""
        rows = slice(None) if ids is None else ids
        self._acc_own[rows] = self._sensordata[rows][:, self._acc_cols]

    def _run(self, call) -> None:
        try:
            call()
        except mj_batch.SimulationError as err:
            raise _failure(err) from err


def _failure(err: mj_batch.SimulationError) -> RuntimeError:
    """The error for simulations that MuJoCo refused to advance (their state is unchanged)."""
    return RuntimeError(f"MuJoCo failed in env indices {err.ids[:20].tolist()} (their state is unchanged): {err}")
