"""Agent (runner + algorithm + policy) configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg


@dataclass
class PPORunnerCfg:
    """Everything the on-policy runner needs besides the env. CLI: ``--agent.<field>``."""

    algorithm: PPOCfg = field(default_factory=PPOCfg)
    policy: PolicyCfg = field(default_factory=PolicyCfg)
    num_steps_per_env: int = 24
    """Rollout length per env and iteration."""
    max_iterations: int = 300
    save_interval: int = 50
    """Iterations between checkpoints (the last iteration is always saved)."""
    logger: tuple[str, ...] = ("tensorboard",)
    """Any of ``tensorboard``, ``wandb``."""
    wandb_project: str = "rslkit"
    check_for_nan: bool = True
    """Raise when observations or rewards are non-finite (names the env indices)."""
    init_at_random_ep_len: bool = False
    """Spread initial episode lengths so time-outs do not all happen at once."""
    episode_stats_window: int = 100
    """Finished episodes averaged for the return / length / success figures."""
