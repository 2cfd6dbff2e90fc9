"""Agent (runner + algorithm + policy) configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.ppo import PPOCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.runners.run_config import RunCfg
from rslkit.utils.validation import expect


@dataclass
class PPORunnerCfg(RunCfg):
    """Everything the on-policy runner needs besides the env. CLI: ``--agent.<field>``."""

    algorithm: PPOCfg = field(default_factory=PPOCfg)
    policy: PolicyCfg = field(default_factory=PolicyCfg)
    num_steps_per_env: int = 24
    """Rollout length per env and iteration."""
    check_for_nan: bool = True
    """Raise when observations or rewards are non-finite (names the env indices)."""
    init_at_random_ep_len: bool = False
    """Spread initial episode lengths so time-outs do not all happen at once."""
    episode_stats_window: int = 100
    """Finished episodes averaged for the return / length / success figures."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the on-policy loop cannot run with."""
        super().check()
        for name in ("num_steps_per_env", "episode_stats_window"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
