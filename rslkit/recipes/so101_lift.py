"""Agent configs of ``so101-lift``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.recipes.sac_defaults import robot_sac_cfg
from rslkit.runners.ppo_config import PPORunnerCfg


def so101_lift_ppo_cfg() -> PPORunnerCfg:
    """PPO settings for ``so101-lift`` (docs/benchmarks.md, section 17: on a 2-core CPU use SAC for this task)."""
    return PPORunnerCfg(
        algorithm=PPOCfg(gamma=0.98, lam=0.95, entropy_coef=0.002, learning_rate=5e-4, num_mini_batches=4),
        policy=PolicyCfg(actor_hidden_dims=(256, 128), critic_hidden_dims=(256, 128), init_std=0.5),
        num_steps_per_env=24,
        max_iterations=500,
        save_interval=50,
        init_at_random_ep_len=True,
    )


RECIPES: dict[str, Callable[[], Any]] = {"ppo": so101_lift_ppo_cfg, "sac": lambda: robot_sac_cfg(gamma=0.97)}
"""Algorithm name -> default agent config of ``so101-lift``."""
