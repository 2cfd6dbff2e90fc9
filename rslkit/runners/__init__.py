"""Runners own the loop: rollouts, updates, logging, checkpoints."""

from rslkit.runners.config import PPORunnerCfg
from rslkit.runners.on_policy_runner import OnPolicyRunner

__all__ = ["OnPolicyRunner", "PPORunnerCfg"]
