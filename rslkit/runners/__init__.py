"""Runners own the loop: rollouts, updates, logging, checkpoints."""

from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg

__all__ = ["OnPolicyRunner", "PPORunnerCfg"]
