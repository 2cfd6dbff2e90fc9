"""Agent (runner + algorithm + policy) configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.runners.run_config import EnvRunCfg


@dataclass
class PPORunnerCfg(EnvRunCfg):
    """Everything the on-policy runner needs besides the env. CLI: ``--agent.<field>``."""

    algorithm: PPOCfg = field(default_factory=PPOCfg)
    policy: PolicyCfg = field(default_factory=PolicyCfg)
