"""Agent config of the off-policy (SAC) runner."""

from __future__ import annotations

from dataclasses import dataclass, field

from rslkit.algorithms.sac import SACCfg, SACNetworkCfg
from rslkit.runners.run_config import RunCfg
from rslkit.storage.replay_buffer import ReplayCfg
from rslkit.utils.validation import expect


@dataclass
class SACRunnerCfg(RunCfg):
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
    check_for_nan: bool = True
    """Raise when observations or rewards are non-finite (names the env indices)."""
    init_at_random_ep_len: bool = False
    """Spread initial episode lengths so time-outs do not all happen at once."""
    episode_stats_window: int = 100
    """Finished episodes averaged for the return / length / success figures."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the off-policy loop cannot run with."""
        super().check()
        for name in ("num_steps_per_env", "episode_stats_window"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        for name in ("random_steps", "learning_starts"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value}")
