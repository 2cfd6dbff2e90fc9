"""MuJoCo physics backends: N copies of one model stepped together, state shared with torch.

``mujoco``: C MuJoCo on a CPU thread pool (:class:`MujocoBackend`). ``warp``: MuJoCo Warp on a GPU, or on the CPU
for tests (:class:`WarpBackend`; Warp itself is imported only when one is built). :func:`make_backend` picks one
by name (``--sim``).
"""

from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg
from rslkit.envs.mujoco.backend_checks import PhysicsBackend
from rslkit.envs.mujoco.factory import SIM_BACKENDS, make_backend
from rslkit.envs.mujoco.models import ModelNotFoundError, load_so101, so101_model_dir
from rslkit.envs.mujoco.warp_backend import WarpBackend, WarpBackendCfg

__all__ = [
    "SIM_BACKENDS",
    "ModelNotFoundError",
    "MujocoBackend",
    "MujocoBackendCfg",
    "PhysicsBackend",
    "WarpBackend",
    "WarpBackendCfg",
    "load_so101",
    "make_backend",
    "so101_model_dir",
]
