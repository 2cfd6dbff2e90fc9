"""Agent configs of ``go2-rough``: the teacher, trained by PPO on proprioception, height samples and the privileged
terms (observation group ``teacher``), with go2-flat's PPO settings and wider networks for the larger input."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rslkit.recipes.go2_flat import go2_flat_ppo_cfg
from rslkit.recipes.sac_defaults import robot_sac_cfg
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.sac_config import SACRunnerCfg


def go2_rough_ppo_cfg() -> PPORunnerCfg:
    """PPO for the ``go2-rough`` teacher: the actor reads ``teacher`` (legged_gym's rough policy input plus friction,
    mass and foot forces), the critic ``critic``; see docs/go2_rough.md."""
    cfg = go2_flat_ppo_cfg()
    cfg.policy = dataclasses.replace(
        cfg.policy,
        actor_hidden_dims=(256, 128, 128),
        critic_hidden_dims=(256, 128, 128),
        actor_obs_groups=("teacher",),
        critic_obs_groups=("critic",),
    )
    cfg.max_iterations = 3000
    return cfg


def go2_rough_sac_cfg() -> SACRunnerCfg:
    """SAC as on go2-flat, its actor on ``teacher`` and its critics on ``critic`` (the same inputs as the PPO
    teacher's)."""
    cfg = robot_sac_cfg(gamma=0.99)
    cfg.policy = dataclasses.replace(cfg.policy, actor_obs_groups=("teacher",), critic_obs_groups=("critic",))
    return cfg


RECIPES: dict[str, Callable[[], Any]] = {"ppo": go2_rough_ppo_cfg, "sac": go2_rough_sac_cfg}
"""Algorithm name -> default agent config of ``go2-rough``."""
