"""Agent configs of ``cartpole``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.recipes.sac_defaults import small_task_sac_cfg
from rslkit.runners.ppo_config import PPORunnerCfg


def cartpole_ppo_cfg() -> PPORunnerCfg:
    """PPO settings (categorical policy): return >= 450 after 33-43 iterations (seeds 0-2), 500 from ~50 (~30 s).

    Long rollouts (64 steps) and 8 epochs on 256 envs (see ``cartpole`` env config) learn the slow cart drift,
    the usual cause of failures after ~200 steps, sooner than wider, shorter batches.
    """
    return PPORunnerCfg(
        algorithm=PPOCfg(
            gamma=0.99, lam=0.95, entropy_coef=0.0, learning_rate=1e-3, num_learning_epochs=8, num_mini_batches=4
        ),
        policy=PolicyCfg(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), distribution="categorical"),
        num_steps_per_env=64,
        max_iterations=100,
        save_interval=50,
    )


RECIPES: dict[str, Callable[[], Any]] = {"ppo": cartpole_ppo_cfg, "sac": small_task_sac_cfg}
"""Algorithm name -> default agent config of ``cartpole``."""

ENV_OVERRIDES: dict[str, list[str]] = {"sac": ["--env.action_type", "continuous"]}
"""Env settings a recipe needs (SAC acts in continuous cartpole; PPO's categorical policy in the discrete one)."""
