"""Default SAC agent configs shared by tasks."""

from __future__ import annotations

from rslkit.algorithms.sac import SACCfg, SACNetworkCfg
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.storage.replay_buffer import ReplayCfg


def small_task_sac_cfg() -> SACRunnerCfg:
    """SAC for small control tasks (pendulum, cartpole-swingup, point-reach, continuous cartpole).

    The large-batch recipe scaled down: small networks, batch 1024, one update per vectorized step, fast target
    tracking (tau 0.1) and 3-step returns with gamma 0.95. What it reaches on pendulum against Stable-Baselines3:
    docs/benchmarks.md, section 3.
    """
    return SACRunnerCfg(
        algorithm=SACCfg(
            gamma=0.95,
            tau=0.1,
            n_step=3,
            batch_size=1024,
            utd_ratio=1.0,
            actor_lr=3e-3,
            critic_lr=3e-3,
            alpha_lr=3e-3,
            init_alpha=0.1,
        ),
        policy=SACNetworkCfg(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64)),
        replay=ReplayCfg(capacity=1_000_000),
        num_steps_per_env=8,
        max_iterations=300,
        random_steps=10,
        learning_starts=10,
        save_interval=100,
    )


def robot_sac_cfg(gamma: float = 0.97) -> SACRunnerCfg:
    """SAC for the MuJoCo robot tasks (so101-reach, so101-lift, go2-flat): 256-256 networks, batch 4096, one update
    per vectorized step of hundreds of envs, 3-step returns; ``gamma`` matched to the task's horizon."""
    return SACRunnerCfg(
        algorithm=SACCfg(
            gamma=gamma,
            tau=0.05,
            n_step=3,
            batch_size=4096,
            utd_ratio=1.0,
            actor_lr=1e-3,
            critic_lr=1e-3,
            alpha_lr=1e-3,
            init_alpha=0.05,
        ),
        policy=SACNetworkCfg(actor_hidden_dims=(256, 256), critic_hidden_dims=(256, 256)),
        replay=ReplayCfg(capacity=1_000_000),
        num_steps_per_env=8,
        max_iterations=300,
        random_steps=5,
        learning_starts=5,
        save_interval=50,
    )
