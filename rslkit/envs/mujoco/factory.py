"""Choose the physics backend of a MuJoCo task by name (``--sim``): one call site for every robot task."""

from __future__ import annotations

import difflib

import mujoco
import torch

from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg
from rslkit.envs.mujoco.backend_checks import PhysicsBackend

SIM_BACKENDS = ("mujoco", "warp")
"""Names accepted by :func:`make_backend`."""


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
