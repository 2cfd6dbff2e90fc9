"""Agent config of the off-policy (SAC) runner."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.sac import SACCfg, SACNetworkCfg
from rslkit.runners.run_config import EnvRunCfg
from rslkit.storage.replay_buffer import ReplayCfg
from rslkit.utils.validation import expect


@dataclass
class SACRunnerCfg(EnvRunCfg):
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
    """Demonstrations to seed the replay buffer with: a LeRobotDataset v3.0 directory with ``next.reward``
    (``python -m rslkit.record``; see ``rslkit.data.transitions.load_demonstrations``)."""
    demo_done_is_terminal: bool = True
    """Store the last frame of an episode whose ``next.done`` is set as terminated
    (no bootstrap). ``next.done`` also marks time-outs; set False for tasks that end only by a time limit."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the off-policy loop cannot run with."""
        super().check()
        for name in ("random_steps", "learning_starts"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value}")
        k, e = self.algorithm.critic_subset, self.policy.num_critics
        expect(k <= e, "algorithm.critic_subset", f"must be <= policy.num_critics ({e}), got {k}")
