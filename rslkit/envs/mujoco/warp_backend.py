"""MuJoCo Warp: ``num_envs`` copies of one ``MjModel`` stepped as one batch of Warp kernels (GPU, or CPU for tests).

Same interface and semantics as :class:`rslkit.envs.mujoco.backend.MujocoBackend`, so a task switches backends with
one flag (``--sim warp``). Differences a task may notice:

- **float32.** MuJoCo Warp computes in single precision: ``qpos``, ``qvel``, ``ctrl``, derived fields and saved
  states are float32 tensors on ``device`` (tasks cast with ``.to(device, float32)`` anyway). Trajectories follow
  C MuJoCo's float64 ones to within float32 round-off that grows with the horizon
  (``tests/envs/test_warp_backend.py`` states the tolerance).
- **Zero copy.** ``qpos``, ``qvel``, ``ctrl`` are views of MuJoCo Warp's own arrays (``wp.to_torch``); writes become
  the simulations' state (call :meth:`WarpBackend.forward` after writing positions, as with the C backend).
- **``state``** cannot be a view (Warp keeps each field in its own array): it is a buffer refreshed at every call
  and written back at the next call when a task wrote into it (``load_state_dict`` then ``forward``), so the
  pattern of the C backend works unchanged. Write either ``state`` or ``qpos``/``qvel``/``ctrl`` between two calls,
  not both.
- **Kernels are compiled** on first use and cached on disk (``$WARP_CACHE_PATH`` or ``~/.cache/warp/<version>``):
  the SO-101 model costs ~35 s of compilation on a 2-core CPU the first time and ~1 s afterwards.
- **On CPU** Warp runs each kernel on one thread: it is the code path CI tests, not a fast simulator (use the
  ``mujoco`` backend on CPU). On CUDA the ``decimation`` substeps of a control step are captured once as a CUDA
  graph and replayed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import mujoco
import torch

from rslkit.envs.mujoco.backend import MujocoBackendCfg
from rslkit.envs.mujoco.backend_checks import PhysicsBackend, acc_sensor_columns

_INSTALL_HINT = "install MuJoCo Warp with `pip install -e '.[warp]'` (mujoco-warp, warp-lang)"
_STATE_SIG = int(mujoco.mjtState.mjSTATE_INTEGRATION)


def import_warp(quiet: bool = True) -> tuple[Any, Any]:
    """``(warp, mujoco_warp)``, imported on first use so that rslkit works without them.

    Args:
        quiet: silence Warp's start-up banner and per-module compile lines (set before MuJoCo Warp initializes
            Warp on import).

    Raises:
        ImportError: either package is missing; the message says what to install.
    """
    try:
        import warp as wp

        if quiet:
            wp.config.log_level = wp.LOG_WARNING
        import mujoco_warp as mjw
    except ImportError as err:
        raise ImportError(f"The 'warp' physics backend needs MuJoCo Warp ({err}); {_INSTALL_HINT}.") from err
    return wp, mjw


@dataclass
class WarpBackendCfg(MujocoBackendCfg):
    """Settings of the MuJoCo Warp backend (``sim_threads`` is ignored: Warp schedules its own kernels)."""

    nconmax: int | None = None
    """Contacts allocated per world (None: MuJoCo Warp's default for the model). A step that needs more raises."""
    njmax: int | None = None
    """Constraint rows allocated per world (None: MuJoCo Warp's default for the model)."""
    cuda_graph: bool = True
    """On CUDA, capture the substeps of a control step as one CUDA graph (much less launch overhead)."""
    verbose: bool = False
    """Let Warp print its start-up banner and one line per compiled module."""


# Running out of the contact (nconmax) or constraint-row (njmax) capacity drops contacts or constraints: the
# physics of those worlds is wrong, so a step raises. Solver iteration limits are not errors (C MuJoCo does not
# raise on them either); MuJoCo Warp prints its other, rarer overflow warnings itself.
_CAPACITY_OVERFLOWS = ("NEFC", "NJMAX_NNZ", "BROADPHASE", "NARROWPHASE")

# Model fields that MuJoCo Warp's set_const writes: it computes them for as many worlds as they have rows, so they
# get one row per env before set_const runs on per-env masses or inertias.
_SET_CONST_OUTPUTS = (
    "body_subtreemass",
    "body_invweight0",
    "dof_invweight0",
    "tendon_length0",
    "tendon_invweight0",
    "actuator_acc0",
    "geom_aabb",
    "geom_rbound",
)


class WarpBackend(PhysicsBackend):
    """``num_envs`` simulations of ``model`` in MuJoCo Warp, on ``device`` (``cpu`` or ``cuda[:i]``).

    Tensors (float32, on ``device``):

    - :attr:`qpos` ``[N, nq]``, :attr:`qvel` ``[N, nv]``, :attr:`ctrl` ``[N, nu]``: live views of MuJoCo Warp's
      arrays; :attr:`state` ``[N, nstate]``: the ``mjSTATE_INTEGRATION`` rows (same layout as the C backend's).
    - :meth:`xpos` ``[N, nbody, 3]``, :meth:`site_xpos` ``[N, nsite, 3]``, :meth:`sensordata` ``[N, nsensordata]``:
      copies of derived fields, current at the state after the last :meth:`step` / :meth:`forward`.

    Raises:
        ImportError: MuJoCo Warp is not installed (the message says how to install it).
        ValueError: bad sizes, a device Warp cannot use, or a model feature MuJoCo Warp does not support.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        cfg: WarpBackendCfg | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        cfg = cfg or WarpBackendCfg()
        self._check_sizes(num_envs, cfg.decimation)
        wp, mjw = import_warp(quiet=not cfg.verbose)
        self._wp, self._mjw = wp, mjw
        wp.init()
        self.cfg = cfg
        self.model = model
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._wp_device = self._warp_device(self.device)
        self._cuda = self.device.type == "cuda"
        self._graph: Any = None
        self._capacity_mask = 0
        for name in _CAPACITY_OVERFLOWS:
            self._capacity_mask |= int(getattr(mjw.OverflowType, name, 0))
        # Sensors computed in the acceleration stage (actuator forces, contact forces, ...): MuJoCo Warp's step1
        # zeroes every sensor, C MuJoCo's keeps these at their last step's values; restore them to match.
        self._acc_cols = torch.as_tensor(acc_sensor_columns(model), dtype=torch.long, device=self.device)
        nstate = mujoco.mj_stateSize(model, _STATE_SIG)
        with wp.ScopedDevice(self._wp_device):
            try:
                self._m = mjw.put_model(model)
            except NotImplementedError as err:
                raise ValueError(
                    f"MuJoCo Warp cannot simulate this model ({err}); use --sim mujoco, or adapt the model with "
                    "mujoco.MjSpec."
                ) from err
            self._d = mjw.put_data(model, mujoco.MjData(model), nworld=num_envs, nconmax=cfg.nconmax, njmax=cfg.njmax)
            self._state_wp = wp.zeros((num_envs, nstate), dtype=wp.float32)
            self._snapshot_wp = wp.zeros((num_envs, nstate), dtype=wp.float32)
            self._sensor_last_wp = wp.zeros_like(self._d.sensordata)
        t = wp.to_torch
        self.qpos: torch.Tensor = t(self._d.qpos)
        self.qvel: torch.Tensor = t(self._d.qvel)
        self.ctrl: torch.Tensor = t(self._d.ctrl)
        self._xpos = t(self._d.xpos)
        self._site_xpos = t(self._d.site_xpos)
        self._sensordata = t(self._d.sensordata)
        self._sensor_last = t(self._sensor_last_wp)
        self._overflow = t(self._d.overflow)
        self._state = t(self._state_wp)
        self._state_seen = self._state._version
        self.reset()

    @staticmethod
    def _warp_device(device: torch.device) -> Any:
        import warp as wp

        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"MuJoCo Warp runs on 'cpu' or 'cuda[:i]', got device '{device}'.")
        if device.type == "cuda" and not wp.is_cuda_available():
            raise ValueError(
                f"Device '{device}' was asked for but Warp finds no CUDA device (NVIDIA driver missing?); use "
                "--device cpu, or --sim mujoco for fast CPU simulation."
            )
        return wp.get_device(str(device))

    # ----------------------------------------------------------------- stepping
    def step(self, ctrl: torch.Tensor) -> None:
        """Set controls ``[N, nu]`` and advance every env by ``decimation`` substeps.

        Raises:
            ValueError: for a wrong shape, or non-finite controls (naming the env indices); no env is stepped then.
            RuntimeError: envs whose state became non-finite or that ran out of contact/constraint capacity (named;
                their state is put back to what it was before this call, the other envs advance).
        """
        self._check_ctrl(ctrl)
        self._write_back_state()
        self.ctrl.copy_(ctrl)
        wp, mjw = self._wp, self._mjw
        self._call(lambda: mjw.get_state(self._m, self._d, self._snapshot_wp, _STATE_SIG))
        if self._cuda and self.cfg.cuda_graph:
            if self._graph is None:
                with wp.ScopedDevice(self._wp_device), wp.ScopedCapture() as capture:
                    self._substeps()
                self._graph = capture.graph
            self._call(lambda: wp.capture_launch(self._graph))
        else:
            self._call(self._substeps)
        if self._acc_cols.numel():
            self._sensordata[:, self._acc_cols] = self._sensor_last[:, self._acc_cols]
        self._check_step()
        self._refresh_state()

    def _substeps(self) -> None:
        """``decimation`` steps, then the position/velocity stages at the new state (C MuJoCo's mj_step1)."""
        for _ in range(self.cfg.decimation):
            self._mjw.step(self._m, self._d)
        # step1 zeroes every sensor; acceleration-stage ones keep their last substep's values (as in C MuJoCo).
        self._wp.copy(self._sensor_last_wp, self._d.sensordata)
        self._mjw.step1(self._m, self._d)

    def forward(self, env_ids: torch.Tensor | None = None) -> None:
        """Recompute derived fields (``xpos``, sensors) after writing state.

        MuJoCo Warp computes every env at once; recomputing an env whose state did not change gives the same
        fields, so ``env_ids`` only mirrors the C backend's signature.
        """
        self._write_back_state()
        self._stage_vel()
        self._refresh_state()

    def reset(self, env_ids: torch.Tensor | None = None, forward: bool = True) -> None:
        """Reset ``env_ids`` (all if None) to the model defaults (``qpos0``, zero velocity, controls, warm start).

        With ``forward=False`` derived fields are left stale, for a caller that writes the state and then calls
        :meth:`forward`.
        """
        self._write_back_state()
        mask = self._mask(env_ids)
        self._call(lambda: self._mjw.reset_data(self._m, self._d, reset=mask))
        if forward:
            self._stage_vel()
        self._refresh_state()

    # ----------------------------------------------------------------- derived fields
    def xpos(self) -> torch.Tensor:
        """Body positions in the world frame ``[N, nbody, 3]`` (a copy)."""
        return self._xpos.clone()

    def site_xpos(self) -> torch.Tensor:
        """Site positions in the world frame ``[N, nsite, 3]`` (a copy)."""
        return self._site_xpos.clone()

    def sensordata(self) -> torch.Tensor:
        """All sensor values ``[N, nsensordata]`` (a copy); slice one with :meth:`sensor_slice`."""
        return self._sensordata.clone()

    # ----------------------------------------------------------------- per-env model fields (randomization)
    def expand_model_field(self, name: str) -> torch.Tensor:
        """Give model field ``name`` (e.g. ``geom_friction``, ``body_mass``) one value per env; return them.

        The role of ``mujoco.batch.Batch.expand`` in the C backend: the result is a live ``[N, ...]`` float32 view
        (vector fields get a trailing component axis) that the physics reads at the next step. After writing a
        field that constants derive from (masses, inertias, armature), call :meth:`set_const`.

        Raises:
            ValueError: MuJoCo Warp cannot batch this field (the message lists the fields it can).
        """
        wp = self._wp
        batched = _batched_model_fields(self._mjw)
        if name not in batched:
            raise ValueError(
                f"MuJoCo Warp cannot give model field '{name}' per-env values; batchable fields: "
                f"{', '.join(sorted(batched))}."
            )
        arr = getattr(self._m, name)
        if arr.shape[0] != self.num_envs:
            rows = arr.numpy()  # shared values, one leading row
            tiled = rows.repeat(self.num_envs, axis=0)
            with wp.ScopedDevice(self._wp_device):
                arr = wp.array(tiled, dtype=arr.dtype)
            setattr(self._m, name, arr)
            self._graph = None  # a captured graph holds the old array's address
        return wp.to_torch(arr)

    def set_const(self, env_ids: Any = None) -> None:
        """Recompute the constants derived from mass, inertia and armature (``mj_setConst``) after writing them.

        MuJoCo Warp recomputes every env; envs whose fields did not change get the same values, so ``env_ids``
        only mirrors the C backend's signature.
        """
        for name in _SET_CONST_OUTPUTS:
            arr = getattr(self._m, name, None)
            if arr is not None and arr.size:
                self.expand_model_field(name)
        self._write_back_state()
        self._call(lambda: self._mjw.set_const(self._m, self._d))
        self._stage_vel()
        self._refresh_state()

    # ----------------------------------------------------------------- state for checkpoints
    @property
    def state(self) -> torch.Tensor:
        """``mjSTATE_INTEGRATION`` rows ``[N, nstate]``, current as of this read; writes take effect at the next
        call (:meth:`forward`, :meth:`step`, ...)."""
        self._write_back_state()
        self._refresh_state()
        return self._state

    def close(self) -> None:
        """Drop the CUDA graph and device arrays."""
        self._graph = None
        self._m = self._d = None

    # ----------------------------------------------------------------- helpers
    def _call(self, fn) -> None:
        """Run Warp work on this backend's device, ordered after pending torch work and finished on return."""
        if self._cuda:
            torch.cuda.current_stream(self.device).synchronize()
        with self._wp.ScopedDevice(self._wp_device):
            fn()
        if self._cuda:
            self._wp.synchronize_device(self._wp_device)

    def _stage_vel(self) -> None:
        """Position- and velocity-dependent fields and sensors at the current state (C MuJoCo's mj_step1)."""
        acc = self._sensordata[:, self._acc_cols]
        self._call(lambda: self._mjw.step1(self._m, self._d))
        self._sensordata[:, self._acc_cols] = acc

    def _mask(self, env_ids: torch.Tensor | None) -> Any:
        if env_ids is None:
            return None
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[env_ids.to(self.device)] = True
        return self._wp.from_torch(mask, dtype=self._wp.bool)

    def _refresh_state(self) -> None:
        self._call(lambda: self._mjw.get_state(self._m, self._d, self._state_wp, _STATE_SIG))
        self._state_seen = self._state._version

    def _write_back_state(self) -> None:
        """Push rows a caller wrote into :attr:`state` since the last call into the simulations."""
        if self._state._version != self._state_seen:
            self._call(lambda: self._mjw.set_state(self._m, self._d, self._state_wp, _STATE_SIG))
            self._state_seen = self._state._version

    def _check_step(self) -> None:
        """Put envs that diverged or overflowed back to their state before the step, then raise naming them."""
        diverged = ~(torch.isfinite(self.qpos).all(-1) & torch.isfinite(self.qvel).all(-1))
        overflow = (self._overflow & self._capacity_mask) != 0
        bad = diverged | overflow
        if not bool(bad.any()):
            return
        ids = bad.nonzero().squeeze(-1)
        self._overflow[ids] = 0
        active = self._wp.from_torch(bad, dtype=self._wp.bool)
        self._call(lambda: self._mjw.set_state(self._m, self._d, self._snapshot_wp, _STATE_SIG, active=active))
        self._stage_vel()
        self._refresh_state()
        shown = f"{ids[:20].tolist()}{' ...' if ids.numel() > 20 else ''}"
        if bool(overflow.any()):
            raise RuntimeError(
                f"MuJoCo Warp ran out of contact or constraint capacity in env indices {shown} (their state is "
                "unchanged); raise WarpBackendCfg.nconmax / njmax."
            )
        raise RuntimeError(f"MuJoCo Warp produced non-finite state in env indices {shown} (their state is unchanged).")


def _batched_model_fields(mjw: Any) -> set[str]:
    """Names of MuJoCo Warp model fields that may hold one row per world (array specs whose first axis is ``*``)."""
    return {
        f.name
        for f in dataclasses.fields(mjw.Model)
        if (shape := getattr(f.type, "shape", ())) and len(shape) > 0 and shape[0] == "*"
    }
