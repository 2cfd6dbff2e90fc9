"""A scripted demonstrator for the ``pendulum`` task: energy-pumping swing-up, then a PD balance controller.

Used to produce (deliberately imperfect, with action noise) demonstrations for behaviour cloning tests and
examples without training an RL policy first.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict


def pendulum_expert(
    obs: TensorDict | torch.Tensor,
    gravity_term: float = 15.0,
    torque_gain: float = 6.0,
    energy_gain: float = 1.0,
    balance_angle: float = 0.5,
    kp: float = 60.0,
    kd: float = 12.0,
) -> torch.Tensor:
    """Normalized torques ``[N, 1]`` in ``[-1, 1]`` for pendulum observations ``[cos th, sin th, th_dot]``.

    With ``th = 0`` upright, Pendulum-v1 has ``th_ddot = 15 sin th + 6 a`` (``g = 10``, ``l = m = 1``, torque
    ``2 a``). The energy ``E = th_dot^2 / 2 + 15 cos th`` changes as ``dE/dt = 6 a th_dot``, so far from the top
    ``a = clip(k_E (E* - E) th_dot)`` pumps energy to the upright value ``E* = 15``; within ``balance_angle`` of the
    top a PD law with gravity compensation holds it up.

    Args:
        obs: an observation TensorDict (group ``policy``) or the ``[N, 3]`` tensor itself.
    """
    x = obs["policy"] if isinstance(obs, TensorDict) else obs
    cos_th, sin_th, th_dot = x[:, 0], x[:, 1], x[:, 2]
    th = torch.atan2(sin_th, cos_th)
    energy = 0.5 * th_dot**2 + gravity_term * cos_th
    swing = energy_gain * (gravity_term - energy) * th_dot
    balance = (-kp * th - kd * th_dot - gravity_term * sin_th) / torque_gain
    action = torch.where(th.abs() < balance_angle, balance, swing)
    return action.clamp(-1.0, 1.0).unsqueeze(-1)
