"""Learning algorithms, one per file."""

from rslkit.algorithms.gae import compute_gae
from rslkit.algorithms.ppo import PPO, PPOCfg

__all__ = ["PPO", "PPOCfg", "compute_gae"]
