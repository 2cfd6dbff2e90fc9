"""Command safety: joint position limits and a rate limit on how far a command may move per tick."""

from __future__ import annotations

import numpy as np

from rslkit.deploy.ros2.config import ControllerCfg


class CommandLimiter:
    """Clamps joint targets to ``[lower, upper]`` and moves them at most ``max_velocity / rate_hz`` per tick.

    The rate limit is relative to the previous command; the first command is limited relative to the measured
    position passed to :meth:`__call__` (so the robot never jumps at start or when leaving a hold).
    """

    def __init__(self, cfg: ControllerCfg) -> None:
        n = len(cfg.joint_names)
        self.lower = np.asarray(cfg.position_lower, np.float64) if cfg.position_lower is not None else None
        self.upper = np.asarray(cfg.position_upper, np.float64) if cfg.position_upper is not None else None
        mv = cfg.max_velocity
        self.max_step = None if mv is None else np.broadcast_to(np.asarray(mv, np.float64) / cfg.rate_hz, (n,))

    def clamp(self, target: np.ndarray) -> np.ndarray:
        """``target [J]`` inside the position limits."""
        if self.lower is not None:
            target = np.maximum(target, self.lower)
        if self.upper is not None:
            target = np.minimum(target, self.upper)
        return target

    def __call__(self, target: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """Safe command ``[J]``: ``target`` rate-limited around ``previous [J]`` (the last command or the measured
        position), then clamped to the limits."""
        if self.max_step is not None:
            target = previous + np.clip(target - previous, -self.max_step, self.max_step)
        return self.clamp(target)
