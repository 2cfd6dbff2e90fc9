"""The policy's observation vector, assembled from named terms in a fixed order."""

from __future__ import annotations

import numpy as np

from rslkit.deploy.ros2.config import ControllerCfg


class ObservationBuilder:
    """Concatenates ``cfg.observation`` terms into one float32 vector ``[D]``.

    Args:
        cfg: the controller settings (terms, joints, default positions, command size).
        obs_dim: the policy's observation size, checked against the terms.

    Raises:
        ValueError: when the terms do not add up to ``obs_dim``.
    """

    def __init__(self, cfg: ControllerCfg, obs_dim: int) -> None:
        n = len(cfg.joint_names)
        self.terms = list(cfg.observation)
        self.sizes = {t: n for t in ("joint_pos", "joint_pos_rel", "joint_pos_normalized", "joint_vel", "last_action")}
        self.sizes["command"] = cfg.command_dim
        total = sum(self.sizes[t] for t in self.terms)
        if total != obs_dim:
            layout = " + ".join(f"{t} ({self.sizes[t]})" for t in self.terms)
            raise ValueError(
                f"The observation terms give {total} values ({layout}) but the policy takes {obs_dim}; set the "
                "'observation' parameter to the terms the policy was trained with."
            )
        self.obs_dim = obs_dim
        self.default = np.asarray(cfg.default_positions if cfg.default_positions is not None else np.zeros(n))
        self.needs_velocity = "joint_vel" in self.terms
        self.mid = self.half = np.zeros(n)
        if cfg.position_lower is not None and cfg.position_upper is not None:
            lower, upper = np.asarray(cfg.position_lower), np.asarray(cfg.position_upper)
            self.mid, self.half = 0.5 * (lower + upper), 0.5 * (upper - lower)

    def __call__(
        self, position: np.ndarray, velocity: np.ndarray | None, command: np.ndarray, last_action: np.ndarray
    ) -> np.ndarray:
        """Observation ``[D]`` float32 from ``position [J]``, ``velocity [J]``, ``command [C]``, ``last_action [J]``."""
        parts = []
        for term in self.terms:
            if term == "joint_pos":
                parts.append(position)
            elif term == "joint_pos_rel":
                parts.append(position - self.default)
            elif term == "joint_pos_normalized":  # [lower, upper] -> [-1, 1]; outside the range it goes beyond
                parts.append((position - self.mid) / self.half)
            elif term == "joint_vel":
                if velocity is None:
                    raise ValueError("The observation needs joint velocities but the joint state has none.")
                parts.append(velocity)
            elif term == "command":
                parts.append(command)
            else:
                parts.append(last_action)
        return np.concatenate(parts).astype(np.float32)
