"""A real loop (learner, 2 actors of random and uneven speeds, gRPC on loopback): no consumed rollout is ever more
than eta versions behind the policy it updates, as the update's own staleness statistics confirm."""

from __future__ import annotations

import pytest
from onpolicy_helpers import Loop, add_actor, learner
from transport_helpers import needs_netns

from rslkit.realworld.onpolicy_config import OnPolicyActorCfg, OnPolicyLearnerCfg

pytestmark = needs_netns
OVERRIDES = ["--agent.num_steps_per_env", "4", "--agent.algorithm.num_mini_batches", "2"]


@pytest.mark.parametrize(("eta", "seed"), [(0, 0), (1, 1), (3, 2)])
def test_staleness_within_eta(eta: int, seed: int) -> None:
    run = learner("point-reach", "ppo", OVERRIDES, OnPolicyLearnerCfg(eta, 2, 4, 30.0), iterations=10)
    metrics: list[dict[str, float]] = []
    iteration = run._iteration
    run._iteration = lambda: (m := iteration(), metrics.append(m))[0]
    loop = Loop(run)
    try:
        for i, delay in enumerate((0.001, 0.004)):
            cfg = OnPolicyActorCfg(give_up_s=5.0, permit_timeout_s=2.0, step_delay_s=delay, step_delay_jitter=4.0)
            add_actor(loop, "point-reach", "ppo", OVERRIDES, 4, seed * 2 + i, cfg)
        run.learn()
    finally:
        loop.close()
    assert len(run.staleness_log) == 10
    worst = max(max(s) for s in run.staleness_log)
    assert 0 <= worst <= eta, run.staleness_log
    assert max(m["Staleness/staleness_max"] for m in metrics) <= eta
    assert all(abs(sum(m[f"Staleness/frac_{s}"] for s in range(eta + 1)) - 1.0) < 1e-9 for m in metrics)
    if eta == 0:
        assert all(m["Loss/first_ratio"] == pytest.approx(1.0, abs=1e-5) for m in metrics)
    sent = sum(s.rollouts for s in loop.summaries.values())
    assert sent >= 20, loop.summaries
