"""Agent configs of ``go2-flat``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.distillation import DistillationCfg
from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.student_teacher import StudentCfg
from rslkit.recipes.sac_defaults import robot_sac_cfg
from rslkit.runners.distillation_config import DistillationRunnerCfg
from rslkit.runners.ppo_config import PPORunnerCfg


def go2_flat_ppo_cfg() -> PPORunnerCfg:
    """PPO settings for ``go2-flat`` on a few CPU cores (see docs/go2.md for the 60-minute recipe and its curve)."""
    return PPORunnerCfg(
        algorithm=PPOCfg(gamma=0.99, lam=0.95, entropy_coef=0.01, learning_rate=1e-3, num_mini_batches=4),
        policy=PolicyCfg(actor_hidden_dims=(128, 128, 128), critic_hidden_dims=(128, 128, 128), init_std=1.0),
        num_steps_per_env=24,
        max_iterations=1000,
        save_interval=20,
        init_at_random_ep_len=True,
    )


def go2_flat_distillation_cfg() -> DistillationRunnerCfg:
    """A blind student (proprioception only: no base linear velocity, see ``ENV_SETTINGS``; the last 5 frames)
    distilled from a privileged PPO teacher that reads the ``critic`` group (noiseless state, linear velocity, foot
    contacts, friction, added mass): train the teacher with ``--agent.policy.actor_obs_groups critic`` and pass its
    checkpoint as ``--agent.teacher_checkpoint`` (docs/distillation.md)."""
    return DistillationRunnerCfg(
        teacher=PolicyCfg(
            actor_hidden_dims=(128, 128, 128), critic_hidden_dims=(128, 128, 128), actor_obs_groups=("critic",)
        ),
        student=StudentCfg(hidden_dims=(128, 128, 128), history_length=5),
        algorithm=DistillationCfg(num_learning_epochs=2, gradient_length=15, learning_rate=1e-3, max_grad_norm=1.0),
        num_steps_per_env=24,
        max_iterations=300,
        save_interval=20,
        init_at_random_ep_len=True,
    )


RECIPES: dict[str, Callable[[], Any]] = {
    "ppo": go2_flat_ppo_cfg,
    "sac": lambda: robot_sac_cfg(gamma=0.99),
    "distillation": go2_flat_distillation_cfg,
}
"""Algorithm name -> default agent config of ``go2-flat``."""

ENV_SETTINGS: dict[str, dict[str, Any]] = {"distillation": {"policy_lin_vel": False}}
"""The distilled student is blind to the base linear velocity (a real Go2 has no direct measurement of it)."""
