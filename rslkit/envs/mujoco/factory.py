"""Choose the physics backend of a MuJoCo task by name (``--sim``): one call site for every robot task."""

from __future__ import annotations

import difflib
from typing import Protocol

import mujoco
import torch

from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg

SIM_BACKENDS = ("mujoco", "warp")
"""Names accepted by :func:`make_backend`."""


class PhysicsBackend(Protocol):
    """What a MuJoCo task may use of its backend (:class:`MujocoBackend`, :class:`WarpBackend`).

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
    def state(self) -> torch.Tensor: ...
    @property
    def nq(self) -> int: ...
    @property
    def nv(self) -> int: ...
    @property
    def nu(self) -> int: ...
    def step(self, ctrl: torch.Tensor) -> None: ...
    def forward(self, env_ids: torch.Tensor | None = None) -> None: ...
    def reset(self, env_ids: torch.Tensor | None = None, forward: bool = True) -> None: ...
    def set_joint_state(
        self,
        env_ids: torch.Tensor,
        qpos: torch.Tensor,
        qvel: torch.Tensor | None = None,
        ctrl: torch.Tensor | None = None,
    ) -> None: ...
    def xpos(self) -> torch.Tensor: ...
    def site_xpos(self) -> torch.Tensor: ...
    def sensordata(self) -> torch.Tensor: ...
    def sensor_slice(self, name: str) -> slice: ...
    def get_state(self) -> torch.Tensor: ...
    def set_state(self, state: torch.Tensor) -> None: ...
    def close(self) -> None: ...


def make_backend(
    model: mujoco.MjModel,
    num_envs: int,
    cfg: MujocoBackendCfg | None = None,
    sim: str = "mujoco",
    device: str | torch.device = "cpu",
) -> PhysicsBackend:
    """``num_envs`` simulations of ``model`` on the backend named ``sim``.

    Args:
        model: compiled model shared by every env.
        num_envs: number of parallel simulations.
        cfg: substeps per control step and stepping threads; a
            :class:`~rslkit.envs.mujoco.warp_backend.WarpBackendCfg` also sets Warp's contact capacity and graphs.
        sim: ``mujoco`` (C MuJoCo on a CPU thread pool, the default) or ``warp`` (MuJoCo Warp, float32, on
            ``device``; needs ``pip install -e '.[warp]'``).
        device: where the task keeps its tensors. The C backend always steps on the CPU; the Warp backend steps on
            this device (``cuda`` for speed, ``cpu`` to test the code path).

    Raises:
        ValueError: ``sim`` is not a known backend (close matches are named).
        ImportError: ``sim="warp"`` without MuJoCo Warp installed (the message says what to install).
    """
    if sim == "mujoco":
        return MujocoBackend(model, num_envs, cfg)
    if sim == "warp":
        from rslkit.envs.mujoco.warp_backend import WarpBackend, WarpBackendCfg

        if cfg is not None and not isinstance(cfg, WarpBackendCfg):
            cfg = WarpBackendCfg(sim_threads=cfg.sim_threads, decimation=cfg.decimation)
        return WarpBackend(model, num_envs, cfg, device=device)
    close = difflib.get_close_matches(sim, SIM_BACKENDS, n=2)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"Unknown physics backend '{sim}'; choose one of {', '.join(SIM_BACKENDS)}.{hint}")
