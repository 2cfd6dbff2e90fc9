"""Agent configs of ``gym:<EnvId>`` tasks (Stable-Baselines3 zoo's MuJoCo settings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.ppo import PPOCfg
from rslkit.algorithms.sac import SACCfg
from rslkit.envs.gym_adapter import is_discrete
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.sac_networks import SACNetworkCfg
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.storage.replay_buffer import ReplayCfg


def gym_ppo_cfg(env_id: str) -> PPORunnerCfg:
    """PPO for Gymnasium envs with SB3-zoo MuJoCo settings (2048 steps per update over 8 envs, 10 epochs)."""
    discrete = is_discrete(env_id)
    return PPORunnerCfg(
        algorithm=PPOCfg(
            num_learning_epochs=10,
            num_mini_batches=32,
            gamma=0.99,
            lam=0.95,
            entropy_coef=0.0,
            learning_rate=3e-4,
            schedule="fixed",
            max_grad_norm=0.5,
        ),
        policy=PolicyCfg(
            actor_hidden_dims=(64, 64),
            critic_hidden_dims=(64, 64),
            activation="tanh",
            distribution="categorical" if discrete else "gaussian",
        ),
        num_steps_per_env=256,
        max_iterations=500,
        save_interval=50,
    )


def gym_sac_cfg(env_id: str) -> SACRunnerCfg:
    """SAC for Gymnasium envs (SB3 MuJoCo settings, vectorized): 256x256 networks, tau 0.005, 5000 random
    transitions, 0.5 updates of 512 transitions per collected transition with the default 8 envs."""
    return SACRunnerCfg(
        algorithm=SACCfg(gamma=0.99, tau=0.005, batch_size=512, utd_ratio=4.0),
        policy=SACNetworkCfg(actor_hidden_dims=(256, 256), critic_hidden_dims=(256, 256)),
        replay=ReplayCfg(capacity=1_000_000),
        num_steps_per_env=125,
        max_iterations=1000,
        random_steps=625,
        learning_starts=625,
        save_interval=100,
    )


def gym_recipes(env_id: str) -> dict[str, Callable[[], Any]]:
    """Algorithm name -> default agent config of ``gym:<env_id>``."""
    return {"ppo": lambda: gym_ppo_cfg(env_id), "sac": lambda: gym_sac_cfg(env_id)}
