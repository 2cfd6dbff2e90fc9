"""Agent config of the off-policy (SAC) runner."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.sac import SACCfg, SACNetworkCfg
from rslkit.storage.replay_buffer import ReplayCfg


@dataclass
class SACRunnerCfg:
    """Everything the off-policy runner needs besides the env. CLI: ``--agent.<field>``.

    One iteration is ``num_steps_per_env`` vectorized env steps, each followed by the gradient updates it is owed
    under ``algorithm.utd_ratio``.
    """

    algorithm: SACCfg = field(default_factory=SACCfg)
    policy: SACNetworkCfg = field(default_factory=SACNetworkCfg)
    replay: ReplayCfg = field(default_factory=ReplayCfg)
    num_steps_per_env: int = 8
    """Vectorized env steps per iteration."""
    max_iterations: int = 1000
    random_steps: int = 10
    """Vectorized env steps with uniform random actions before the policy acts (per env)."""
    learning_starts: int = 10
    """Vectorized env steps before the first gradient update."""
    demo_path: str = ""
    """Demonstrations to seed the replay buffer with: a ``TensorDict`` saved by ``torch.save`` (``.pt``) or a
    ``TensorDict.memmap`` directory (fields: see ``ReplayBuffer.add_demonstrations``)."""
    save_interval: int = 100
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
