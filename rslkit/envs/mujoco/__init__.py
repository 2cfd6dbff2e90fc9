"""C MuJoCo physics backend: N copies of one model stepped on a thread pool, state shared with torch."""

from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg
from rslkit.envs.mujoco.models import ModelNotFoundError, load_so101, so101_model_dir

__all__ = ["ModelNotFoundError", "MujocoBackend", "MujocoBackendCfg", "load_so101", "so101_model_dir"]
