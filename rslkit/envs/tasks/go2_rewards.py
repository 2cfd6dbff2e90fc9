"""Reward terms and frame helpers of ``go2-flat``: pure functions over batched tensors (legged_gym conventions).

Every function takes ``[N, ...]`` tensors and returns an unweighted ``[N]`` term; the task weights them and logs
each one separately.
"""

from __future__ import annotations

import torch


def quat_rotate_inverse(quat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """Rotate world-frame ``vec [N, 3]`` into the frame of unit quaternions ``quat [N, 4]`` (w, x, y, z)."""
    w, xyz = quat[:, :1], quat[:, 1:]
    t = 2.0 * torch.linalg.cross(xyz, vec, dim=-1)
    return vec - w * t + torch.linalg.cross(xyz, t, dim=-1)


def yaw_quat(yaw: torch.Tensor) -> torch.Tensor:
    """Quaternions ``[N, 4]`` (w, x, y, z) of rotations by ``yaw [N]`` about the world z axis."""
    half = 0.5 * yaw
    zeros = torch.zeros_like(yaw)
    return torch.stack((torch.cos(half), zeros, zeros, torch.sin(half)), -1)


def track_lin_vel_xy(command: torch.Tensor, lin_vel: torch.Tensor, sigma: float) -> torch.Tensor:
    """``exp(-|v*_xy - v_xy|^2 / sigma)``: command ``[N, 3]`` (vx, vy, yaw rate), base-frame ``lin_vel [N, 3]``."""
    return torch.exp(-(command[:, :2] - lin_vel[:, :2]).square().sum(-1) / sigma)


def track_ang_vel_z(command: torch.Tensor, ang_vel: torch.Tensor, sigma: float) -> torch.Tensor:
    """``exp(-(w*_z - w_z)^2 / sigma)`` for the commanded yaw rate ``command[:, 2]``."""
    return torch.exp(-(command[:, 2] - ang_vel[:, 2]).square() / sigma)


def lin_vel_z(lin_vel: torch.Tensor) -> torch.Tensor:
    """Vertical base velocity squared (bouncing)."""
    return lin_vel[:, 2].square()


def ang_vel_xy(ang_vel: torch.Tensor) -> torch.Tensor:
    """Roll and pitch rates squared (wobbling)."""
    return ang_vel[:, :2].square().sum(-1)


def orientation(projected_gravity: torch.Tensor) -> torch.Tensor:
    """Tilt: squared horizontal part of gravity seen from the base ``[N, 3]`` (0 when level)."""
    return projected_gravity[:, :2].square().sum(-1)


def torques(torque: torch.Tensor) -> torch.Tensor:
    """Joint torques ``[N, 12]`` squared and summed (effort)."""
    return torque.square().sum(-1)


def joint_acc(qvel: torch.Tensor, prev_qvel: torch.Tensor, dt: float) -> torch.Tensor:
    """Joint accelerations squared over one control step (jerky motion)."""
    return ((qvel - prev_qvel) / dt).square().sum(-1)


def action_rate(action: torch.Tensor, prev_action: torch.Tensor) -> torch.Tensor:
    """``|a_t - a_{t-1}|^2`` (smoothness)."""
    return (action - prev_action).square().sum(-1)


def feet_air_time(
    air_time: torch.Tensor, first_contact: torch.Tensor, command: torch.Tensor, target: float
) -> torch.Tensor:
    """legged_gym's step reward: at touchdown, ``sum(air_time - target)`` over feet; zero for near-zero commands.

    ``air_time [N, 4]`` is the swing duration so far (seconds), ``first_contact [N, 4]`` marks touchdowns.
    """
    moving = torch.linalg.vector_norm(command[:, :2], dim=-1) > 0.1
    return ((air_time - target) * first_contact).sum(-1) * moving


def undesired_contacts(contacts: torch.Tensor) -> torch.Tensor:
    """Number of bodies other than the feet touching the floor, from 0/1 flags ``[N, K]``."""
    return contacts.sum(-1)
