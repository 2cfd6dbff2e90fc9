"""Settings of the real-world learner's loop (the SAC settings stay in the agent config). CLI: ``--learner.<field>``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rslkit.utils.validation import expect, finite


@dataclass
class LearnerCfg:
    """How the learner turns arriving transitions into updates and weights.

    The gradient updates owed are ``agent.algorithm.utd_ratio`` per online transition received (the update-to-data
    ratio; 10-20 makes real-robot RL sample-efficient, RLPD / HIL-SERL), from ``agent.learning_starts`` received
    transitions on. One iteration (one log line, ``save_interval`` counts them) is ``updates_per_iteration``
    updates, or fewer when ``iteration_timeout_s`` passes first (no data: the learner waits for it).
    """

    updates_per_iteration: int = 100
    iteration_timeout_s: float = 2.0
    publish_every_updates: int = 50
    """Push new weights every this many updates (HIL-SERL: 50)."""
    publish_every_s: float = 0.0
    """Also push when this many seconds passed since the last push and there were updates (0: off)."""
    publish: Literal["torch", "onnx", "both"] = "torch"
    """What a push holds: the actor's state dict (for torch actors), an exported ONNX policy (robots without
    torch, e.g. the ROS 2 node's actor mode), or both."""
    bc_warmstart_updates: int = 0
    """Behaviour-cloning updates of the actor on the demonstrations before RL starts (needs agent.demo_path)."""
    max_staleness: int = 0
    """Pause updates while a connected actor runs weights more than this many versions old (0: no bound)."""
    journal: bool = True
    """Append every stored message to ``<run dir>/journal`` (fsynced) before acknowledging it, so a killed learner
    loses nothing it acknowledged. Off: an ack means "in memory" (the actors' spools then hold only unacked data)."""
    journal_fsync: bool = True
    checkpoint_every_s: float = 60.0
    """Also checkpoint when this many seconds passed since the last checkpoint (0: only every save_interval)."""
    episode_window: int = 10
    """Episodes in the moving mean return the learner logs (over all actors)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the learner cannot run with."""
        for name in ("updates_per_iteration", "publish_every_updates", "episode_window"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        for name in ("bc_warmstart_updates", "max_staleness"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value}")
        for name in ("iteration_timeout_s",):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        for name in ("publish_every_s", "checkpoint_every_s"):
            value = getattr(self, name)
            expect(finite(value) and value >= 0, name, f"must be >= 0 (0: off), got {value}")
        expect(self.publish in ("torch", "onnx", "both"), "publish", f"must be torch, onnx or both, got {self.publish}")
