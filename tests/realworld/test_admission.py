"""AReaL's admission rule: unit cases, and a property test over random actor speeds (simulated, no network)."""

from __future__ import annotations

import heapq
import random

import pytest

from rslkit.realworld.admission import Admission


def test_eta0_is_synchronous() -> None:
    a = Admission(batch_rollouts=2, max_staleness=0)
    assert [a.grant("x"), a.grant("y"), a.grant("z")] == [0, 1, None]  # rollout 2 belongs to update 1
    a.deliver(0)
    assert a.batch() is None
    a.deliver(1)
    assert a.batch() == [0, 1]
    a.advance()
    assert a.grant("z") == 2


def test_eta_allows_that_many_batches_ahead() -> None:
    a = Admission(batch_rollouts=2, max_staleness=2)
    assert [a.grant(i) for i in range(7)] == [0, 1, 2, 3, 4, 5, None]


def test_revoked_permit_is_granted_again_first() -> None:
    a = Admission(batch_rollouts=2, max_staleness=1)
    assert [a.grant("a"), a.grant("b"), a.grant("a")] == [0, 1, 2]
    assert a.revoke("a") == [0, 2]
    assert a.holder(0) is None and a.outstanding() == 1
    with pytest.raises(ValueError, match="holds no permit"):
        a.deliver(0)
    assert a.grant("c") == 0 and a.holder(0) == "c"


def test_resume_starts_at_the_checkpoint() -> None:
    a = Admission(batch_rollouts=3, max_staleness=0, updates=4)
    assert a.grant("x") == 12
    with pytest.raises(RuntimeError, match="has not received"):
        a.advance()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        Admission(2, -1)
    with pytest.raises(ValueError, match="batch_rollouts"):
        Admission(0, 1)


def _simulate(seed: int) -> tuple[list[int], int]:
    """Actors of random (and changing) speeds against a learner of random update time; returns the staleness of
    every consumed rollout and eta. The actor acts with the newest version when its rollout starts."""
    r = random.Random(seed)
    actors, batch, eta = r.randint(1, 5), r.randint(1, 4), r.randint(0, 4)
    a = Admission(batch, eta)
    speed = [r.uniform(0.1, 3.0) for _ in range(actors)]
    version, staleness, t = 0, [], 0.0
    events: list[tuple[float, int, str, int]] = []  # (time, order, kind, actor)
    order = 0
    waiting = list(range(actors))
    started: dict[int, int] = {}  # rollout -> version it acts with
    learner_busy_until = None
    while version < 30:
        for actor in list(waiting):
            k = a.grant(actor)
            if k is None:
                break
            waiting.remove(actor)
            started[k] = version
            order += 1
            heapq.heappush(events, (t + speed[actor] * r.uniform(0.5, 2.0), order, "done", actor * 10**6 + k))
        if learner_busy_until is None and a.batch() is not None:
            staleness += [version - started.pop(k) for k in a.batch() or []]
            learner_busy_until = t + r.uniform(0.01, 2.0)
            order += 1
            heapq.heappush(events, (learner_busy_until, order, "update", -1))
        t, _, kind, who = heapq.heappop(events)
        if kind == "done":
            actor, k = divmod(who, 10**6)
            a.deliver(k)
            waiting.append(actor)
            if r.random() < 0.05:  # an actor restarts mid-rollout: its next permit is revoked and reissued
                k2 = a.grant(actor)
                if k2 is not None:
                    started[k2] = version
                    a.revoke(actor)
        else:
            a.advance()
            version += 1
            learner_busy_until = None
    return staleness, eta


@pytest.mark.parametrize("seed", range(200))
def test_staleness_never_exceeds_eta(seed: int) -> None:
    staleness, eta = _simulate(seed)
    assert staleness and max(staleness) <= eta and min(staleness) >= 0
