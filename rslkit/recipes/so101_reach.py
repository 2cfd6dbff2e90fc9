"""Agent configs of ``so101-reach``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.flow import FlowPolicyCfg
from rslkit.recipes.sac_defaults import robot_sac_cfg
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.ppo_config import PPORunnerCfg


def so101_reach_ppo_cfg() -> PPORunnerCfg:
    """PPO settings for ``so101-reach``: with 512 envs on 2 busy CPU cores (one torch thread, 2 sim threads) the
    success rate went 0.01 -> 0.39 -> 0.74 -> 0.88 at iterations 10 / 40 / 60 / 80 (11 / 46 / 72 / 96 s; ~10k env
    steps/s including PPO updates). Runs are bit-reproducible for a given seed and thread count."""
    return PPORunnerCfg(
        algorithm=PPOCfg(gamma=0.97, lam=0.95, entropy_coef=0.0, learning_rate=1e-3, num_mini_batches=4),
        policy=PolicyCfg(actor_hidden_dims=(128, 128), critic_hidden_dims=(128, 128), init_std=0.5),
        num_steps_per_env=24,
        max_iterations=80,
        save_interval=50,
        init_at_random_ep_len=True,
    )


def so101_reach_flow_bc_cfg() -> FlowBCRunnerCfg:
    """Flow behaviour cloning of reaching demonstrations (``python -m rslkit.record``): chunks of 50 joint targets
    (1 s at 50 Hz, the pi0 / SmolVLA chunk length), K = 4 Euler steps, 256-wide residual MLP with 3 blocks."""
    return FlowBCRunnerCfg(
        algorithm=FlowBCCfg(batch_size=256, learning_rate=1e-3),
        policy=FlowPolicyCfg(horizon=50, num_inference_steps=4, hidden_dim=256, num_blocks=3),
        max_iterations=30,
        updates_per_iteration=100,
        eval_interval=0,
    )


RECIPES: dict[str, Callable[[], Any]] = {
    "ppo": so101_reach_ppo_cfg,
    "sac": lambda: robot_sac_cfg(gamma=0.97),
    "flow-bc": so101_reach_flow_bc_cfg,
}
"""Algorithm name -> default agent config of ``so101-reach``."""
