"""Runners own the loop: rollouts, updates, logging, checkpoints."""

from rslkit.runners.config import PPORunnerCfg
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.utils.allocator import share_one_malloc_arena

share_one_malloc_arena()  # before torch's OpenMP threads start (see rslkit.utils.allocator)

__all__ = ["OnPolicyRunner", "PPORunnerCfg"]
