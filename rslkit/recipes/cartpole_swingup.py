"""Agent configs of ``cartpole-swingup``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.recipes.sac_defaults import small_task_sac_cfg
from rslkit.runners.ppo_config import PPORunnerCfg


def cartpole_swingup_ppo_cfg() -> PPORunnerCfg:
    """PPO settings for the swing-up (Gaussian policy): swinging (return ~110) after 30 iterations, up and balancing
    (return >= 200) after 50-70, return 320-420 after the default 150 iterations (~90 s on 2 CPU cores).

    Episodes start at random lengths so that returns are reported every iteration, not every 500 steps.
    """
    return PPORunnerCfg(
        algorithm=PPOCfg(
            gamma=0.99, lam=0.95, entropy_coef=0.0, learning_rate=1e-3, num_learning_epochs=8, num_mini_batches=4
        ),
        policy=PolicyCfg(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), init_std=1.0),
        num_steps_per_env=64,
        max_iterations=150,
        save_interval=50,
        init_at_random_ep_len=True,
    )


RECIPES: dict[str, Callable[[], Any]] = {"ppo": cartpole_swingup_ppo_cfg, "sac": small_task_sac_cfg}
"""Algorithm name -> default agent config of ``cartpole-swingup``."""
