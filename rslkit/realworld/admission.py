"""Bounded staleness for an asynchronous on-policy learner: AReaL's admission rule (Fu et al. 2025), pure python.

With ``B`` rollouts consumed per update, rollouts are numbered ``k = 0, 1, ...`` in the order they are admitted and
update ``j`` consumes exactly rollouts ``jB .. jB + B - 1``, so rollout ``k`` is consumed by update ``floor(k / B)``.
Rollout ``k`` may start only while the learner's policy version ``i`` (updates made) satisfies

    floor(k / B) - i <= eta,

and the actor then acts with weights of version ``>= i``. Every sample consumed by update ``j`` is therefore at most
``j - i <= eta`` versions behind the policy being updated. ``eta = 0`` is synchronous PPO: the rollouts of update
``j`` all start after update ``j - 1`` and act with version ``j``. A permit whose actor vanished (its stream ended)
is revoked and its number handed to the next actor that asks, so one lost actor never stalls the learner.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Admission:
    """Who may collect which rollout (not thread-safe: the learner holds one lock around it).

    Args:
        batch_rollouts: ``B``, rollouts per update.
        max_staleness: ``eta >= 0``.
        updates: the updates (batches consumed) made so far: a resumed run starts at its checkpoint's iteration and
            rollout numbers at ``updates * B``. It is ``i`` of the rule: the policy version advances by at most one
            per update (ReinFlow's critic warm-up updates leave it), so staleness stays within eta.
    """

    batch_rollouts: int
    max_staleness: int
    updates: int = 0
    _next: int = field(init=False, default=0)
    _free: set[int] = field(init=False, default_factory=set)
    _granted: dict[int, object] = field(init=False, default_factory=dict)
    _delivered: set[int] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        if type(self.batch_rollouts) is not int or self.batch_rollouts < 1:
            raise ValueError(f"batch_rollouts must be an integer >= 1, got {self.batch_rollouts!r}.")
        if type(self.max_staleness) is not int or self.max_staleness < 0:
            raise ValueError(f"max_staleness must be an integer >= 0 (0: synchronous), got {self.max_staleness!r}.")
        self._next = self.updates * self.batch_rollouts

    def consumer(self, k: int) -> int:
        """The update that consumes rollout ``k``: ``floor(k / B)``."""
        return k // self.batch_rollouts

    def grant(self, holder: object) -> int | None:
        """The number of the rollout ``holder`` may collect now, or None while the rule forbids any.

        A revoked number is handed out again first (lowest first), so the learner's next batch fills.
        """
        k = min(self._free) if self._free else self._next
        if self.consumer(k) - self.updates > self.max_staleness:
            return None
        if self._free:
            self._free.discard(k)
        else:
            self._next += 1
        self._granted[k] = holder
        return k

    def holder(self, k: int) -> object | None:
        """Who holds the permit of rollout ``k`` (None: not granted, delivered or revoked)."""
        return self._granted.get(k)

    def held_by(self, holder: object) -> list[int]:
        """The rollouts ``holder`` holds permits for (granted, not yet delivered)."""
        return sorted(k for k, h in self._granted.items() if h == holder)

    def deliver(self, k: int) -> None:
        """Rollout ``k`` arrived; ValueError if it was not granted (or was revoked)."""
        if k not in self._granted:
            raise ValueError(f"rollout {k} holds no permit (never granted, revoked when its stream ended, or resent).")
        del self._granted[k]
        self._delivered.add(k)

    def revoke(self, holder: object) -> list[int]:
        """Take back every permit ``holder`` holds (its actor is gone); returns their numbers."""
        taken = self.held_by(holder)
        for k in taken:
            del self._granted[k]
            self._free.add(k)
        return taken

    def batch(self) -> list[int] | None:
        """The rollout numbers update number ``updates`` consumes, once all of them arrived (else None)."""
        first = self.updates * self.batch_rollouts
        ks = list(range(first, first + self.batch_rollouts))
        return ks if all(k in self._delivered for k in ks) else None

    def advance(self) -> None:
        """Update number ``updates`` consumed its batch: forget it and count the update."""
        ks = self.batch()
        if ks is None:
            raise RuntimeError(f"update {self.updates} has not received its {self.batch_rollouts} rollouts yet.")
        self._delivered.difference_update(ks)
        self.updates += 1

    def outstanding(self) -> int:
        """Permits granted and not yet delivered."""
        return len(self._granted)
