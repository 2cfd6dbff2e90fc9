"""Agent configs of ``pendulum``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.algorithms.ppo import PPOCfg
from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.flow import FlowPolicyCfg
from rslkit.recipes.sac_defaults import small_task_sac_cfg
from rslkit.runners.dsrl_runner import dsrl_cfg
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.reinflow_runner import ReinFlowRunnerCfg


def pendulum_ppo_cfg() -> PPORunnerCfg:
    """PPO settings that reach a mean return of about -170 on Pendulum in 40 iterations (~20 s on 2 CPU cores)."""
    return PPORunnerCfg(
        algorithm=PPOCfg(gamma=0.95, lam=0.95, entropy_coef=0.0, learning_rate=1e-3, num_mini_batches=4),
        policy=PolicyCfg(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), init_std=1.0),
        num_steps_per_env=32,
        max_iterations=100,
        save_interval=50,
        # Spread the first time-outs: 200-step episodes that all end together make learning (and its stats) lurch.
        init_at_random_ep_len=True,
    )


def pendulum_flow_bc_cfg() -> FlowBCRunnerCfg:
    """Flow behaviour cloning on pendulum demonstrations: 64-wide rectified-flow policy over 4-action chunks,
    2000 updates of batch 1024 (~20 s on 2 CPU cores)."""
    return FlowBCRunnerCfg(
        algorithm=FlowBCCfg(learning_rate=2e-3, batch_size=1024),
        policy=FlowPolicyCfg(horizon=4, num_inference_steps=4, hidden_dim=64, num_blocks=2),
        max_iterations=20,
        updates_per_iteration=100,
        eval_interval=5,
        save_interval=20,
    )


def pendulum_reinflow_cfg() -> ReinFlowRunnerCfg:
    """ReinFlow on pendulum (use --num_envs 64): raises a cloned policy's return by ~60-80 in 25 iterations."""
    return ReinFlowRunnerCfg(
        algorithm=ReinFlowCfg(
            gamma=0.95, reward_scale=0.1, critic_hidden_dims=(64, 64), actor_lr=3e-4, critic_lr=1e-3, clip_param=0.02
        ),
        num_steps_per_env=25,
        max_iterations=40,
        eval_interval=10,
        save_interval=20,
    )


RECIPES: dict[str, Callable[[], Any]] = {
    "ppo": pendulum_ppo_cfg,
    "sac": small_task_sac_cfg,
    "flow-bc": pendulum_flow_bc_cfg,
    "reinflow": pendulum_reinflow_cfg,
    "dsrl": lambda: dsrl_cfg(small_task_sac_cfg(), chunk=4),
}
"""Algorithm name -> default agent config of ``pendulum``."""
