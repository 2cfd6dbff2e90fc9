"""Intervention sources: the scripted human's triggers (corridor, distance, stall), bounded takeovers, cooldown,
decaying takeover probability, per-episode counters, and the module's import without torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rslkit.realworld.interventions import InterventionCounter, ScriptedHuman, as_action

EXPERT_ACTION = np.array([0.5, -0.5], np.float32)
POLICY_ACTION = np.zeros(2, np.float32)


def _expert(obs):
    return EXPERT_ACTION


def _obs(d: float) -> dict[str, np.ndarray]:
    return {"policy": np.array([d], np.float32)}


def _dist(obs) -> float:
    return float(obs["policy"][0])


def _run(human: ScriptedHuman, distances) -> list[bool]:
    return [human(_obs(d), POLICY_ACTION) is not None for d in distances]


def test_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "import rslkit.realworld.interventions, rslkit.realworld.teleop\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_corridor_takeover_is_bounded_then_cooldown() -> None:
    human = ScriptedHuman(_expert, corridor=lambda o: _dist(o) < 1.0, max_takeover_steps=3, cooldown_steps=2)
    human.reset()
    # outside the corridor all along: 3 expert steps, 2 cooldown steps, then the next takeover
    assert _run(human, [2.0] * 8) == [True, True, True, False, False, True, True, True]
    stats = human.episode_stats()
    assert stats["interventions"] == 2 and stats["intervention_steps"] == 6 and stats["steps"] == 8
    assert stats["intervention_rate"] == pytest.approx(6 / 8)
    out = human(_obs(2.0), POLICY_ACTION)
    assert out is None  # cooldown after the second takeover
    human.reset()
    assert human.episode_stats()["steps"] == 0 and human.episode_stats()["episodes"] == 2
    assert _run(human, [0.5, 0.5, 2.0]) == [False, False, True]
    np.testing.assert_array_equal(human(_obs(2.0), POLICY_ACTION), EXPERT_ACTION)


def test_distance_corridor_grace_and_max_takeovers() -> None:
    human = ScriptedHuman(
        _expert, 1.0, distance=_dist, max_takeover_steps=1, cooldown_steps=0, grace_steps=2, max_takeovers=2
    )
    human.reset()
    assert _run(human, [5.0, 5.0, 5.0, 0.5, 5.0, 5.0, 5.0]) == [False, False, True, False, True, False, False]


def test_stall_detection_and_goal() -> None:
    human = ScriptedHuman(
        _expert,
        distance=_dist,
        stall_steps=3,
        min_progress=0.01,
        goal_distance=0.05,
        max_takeover_steps=2,
        cooldown_steps=0,
    )
    human.reset()
    # progress every step: no takeover; then stuck at 0.5 -> a takeover after 3 steps without progress
    assert _run(human, [0.9, 0.8, 0.7, 0.6, 0.5]) == [False] * 5
    assert _run(human, [0.5, 0.5, 0.5, 0.5, 0.5]) == [False, False, True, True, False]
    human.reset()
    assert _run(human, [0.01] * 10) == [False] * 10  # at the goal: never a stall
    human.reset()
    assert _run(human, [0.9, 0.899, 0.898, 0.897]) == [False, False, False, True]  # progress < min_progress


def test_takeover_probability_decays_over_episodes_and_is_seeded() -> None:
    def rates(seed: int) -> list[float]:
        human = ScriptedHuman(
            _expert,
            corridor=lambda o: False,
            max_takeover_steps=1,
            cooldown_steps=0,
            takeover_prob=1.0,
            prob_decay=0.7,
            seed=seed,
        )
        out = []
        for _ in range(8):
            human.reset()
            _run(human, [1.0] * 200)
            out.append(human.episode_stats()["intervention_rate"])
        return out

    a = rates(0)
    assert a == rates(0) and a != rates(1)
    assert a[0] == 1.0
    for episode, rate in enumerate(a):
        assert abs(rate - 0.7**episode) < 0.12, (episode, rate)  # 200 draws per episode


def test_arguments_and_actions_are_checked() -> None:
    with pytest.raises(ValueError, match="trigger"):
        ScriptedHuman(_expert)
    with pytest.raises(ValueError, match="distance"):
        ScriptedHuman(_expert, stall_steps=3)
    with pytest.raises(ValueError, match="distance"):
        ScriptedHuman(_expert, 0.5)
    with pytest.raises(ValueError, match="takeover_prob"):
        ScriptedHuman(_expert, corridor=lambda o: True, takeover_prob=2.0)
    np.testing.assert_array_equal(as_action(np.array([2.0, -3.0]), POLICY_ACTION), [1.0, -1.0])
    with pytest.raises(ValueError, match="shape"):
        as_action(np.zeros(3), POLICY_ACTION)
    with pytest.raises(ValueError, match="finite"):
        as_action(np.array([np.nan, 0.0]), POLICY_ACTION)
    human = ScriptedHuman(lambda o: np.zeros(3), corridor=lambda o: False)
    with pytest.raises(ValueError, match="shape"):
        human(_obs(1.0), POLICY_ACTION)


def test_episode_counter_counts_separate_interventions() -> None:
    counter = InterventionCounter()
    counter.start_episode()
    for active in (False, True, True, False, True, False):
        counter.count(active)
    stats = counter.episode_stats()
    assert stats["interventions"] == 2 and stats["intervention_steps"] == 3 and stats["steps"] == 6
    counter.start_episode()
    counter.count(True)
    assert counter.episode_stats()["interventions"] == 1
    assert counter.episode_stats()["total_intervention_rate"] == pytest.approx(4 / 7)
