"""The camera fields a MuJoCo task's config shares (``--env.cameras front,wrist``); no MuJoCo import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rslkit.envs.torch_task import TaskCfg


@dataclass
class CameraTaskCfg(TaskCfg):
    """A task config whose task can render named cameras as observation groups (off by default)."""

    available_cameras: ClassVar[tuple[str, ...]] = ()
    """The camera names the task can render (set by each task's config class)."""
    cameras: tuple[str, ...] = ()
    """Cameras whose images join the observations, each as group ``camera_<name>`` (uint8 ``[N, H, W, 3]``;
    ``--env.cameras front,wrist``; empty, the default: none). See docs/cameras.md."""
    camera_width: int = 64
    camera_height: int = 64
    camera_quality: str = "fast"
    """``fast``: links drawn as boxes; ``visual``: the meshes, several times slower on a CPU (docs/benchmarks.md, 9)."""

    def check(self) -> None:
        """Raise ``ConfigError`` for a field no task can run with (camera fields: when ``cameras`` is set)."""
        super().check()
        if self.cameras:
            from rslkit.envs.mujoco.cameras import check_camera_cfg

            check_camera_cfg(self, self.available_cameras)
