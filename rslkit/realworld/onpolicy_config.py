"""Settings of the asynchronous on-policy loop (PPO, ReinFlow). CLI: ``--learner.<field>``, ``--actor.<field>``."""

from __future__ import annotations

from dataclasses import dataclass

from rslkit.link.transport import ActorLinkCfg
from rslkit.utils.validation import expect, finite


@dataclass
class OnPolicyLearnerCfg:
    """How the learner admits and consumes rollouts (:mod:`rslkit.realworld.admission`).

    One learner iteration consumes ``rollouts_per_update`` rollouts of ``actor_envs`` envs x
    ``agent.num_steps_per_env`` steps each (side by side, as one rollout of ``rollouts_per_update x actor_envs``
    envs) and makes one update of the algorithm.
    """

    max_staleness: int = 0
    """``eta``: rollout k may start only while ``floor(k / rollouts_per_update) - updates <= eta``, so no consumed
    sample is more than eta versions behind. 0: synchronous PPO (actors wait for every update)."""
    rollouts_per_update: int = 2
    """``B``: rollouts consumed per update (usually the number of actors)."""
    actor_envs: int = 64
    """Envs of every actor (all actors run the same number: an actor reads ``--learner.actor_envs`` too)."""
    rollout_timeout_s: float = 300.0
    """The learner stops with an error when no rollout arrived for this long (no actor is running)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the learner cannot run with."""
        expect(self.max_staleness >= 0, "max_staleness", f"must be an integer >= 0, got {self.max_staleness}")
        for name in ("rollouts_per_update", "actor_envs"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        value = self.rollout_timeout_s
        expect(finite(value) and value > 0, "rollout_timeout_s", f"must be a finite number > 0, got {value}")


@dataclass
class OnPolicyActorCfg(ActorLinkCfg):
    """How an on-policy actor reaches the learner and waits, and optional slowness for experiments. CLI:
    ``--actor.<field>``."""

    permit_timeout_s: float = 10.0
    """One bounded wait for a permit (or for the weights it names); the actor then checks the learner is alive."""
    give_up_s: float = 30.0
    """The actor exits cleanly when the learner has said nothing (not even an answer to a heartbeat) this long."""
    max_rollouts: int = 0
    """Stop after this many rollouts (0: until the learner is gone or a signal)."""
    step_delay_s: float = 0.0
    """Sleep this long per env step (emulates a slower robot or simulator)."""
    step_delay_jitter: float = 0.0
    """Each sleep is ``step_delay_s * (1 + jitter * u)``, ``u`` uniform in [0, 1)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the actor cannot run with."""
        for name in ("permit_timeout_s", "give_up_s"):
            value = getattr(self, name)
            expect(finite(value) and value > 0, name, f"must be a finite number > 0, got {value}")
        for name in ("step_delay_s", "step_delay_jitter"):
            value = getattr(self, name)
            expect(finite(value) and value >= 0, name, f"must be a finite number >= 0, got {value}")
        expect(self.max_rollouts >= 0, "max_rollouts", f"must be >= 0 (0: no limit), got {self.max_rollouts}")
