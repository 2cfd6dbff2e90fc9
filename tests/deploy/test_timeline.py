"""Merge modes, future-state roll-forward and the latency estimate."""

from __future__ import annotations

import numpy as np
import pytest

from rslkit.deploy.future_state import FutureStateConditioner, roll_forward
from rslkit.deploy.latency import LatencyEstimator
from rslkit.deploy.timeline import ActionTimeline


def _chunk(values) -> np.ndarray:
    return np.asarray(values, np.float32).reshape(-1, 1)


def _plan(tl: ActionTimeline, ticks) -> list[float]:
    return [float(tl.action(t)[0][0]) if tl.action(t) is not None else None for t in ticks]


def test_replace_from_keeps_the_past_and_drops_stale_actions():
    tl = ActionTimeline("replace")
    assert tl.merge(_chunk([1, 2, 3, 4]), start=0, from_tick=0, chunk_id=0) == 0
    assert tl.merge(_chunk([10, 11, 12]), start=2, from_tick=1, chunk_id=1) == 0
    assert _plan(tl, range(6)) == [1, 2, 10, 11, 12, None]
    # late arrival: the chunk was for tick 2 on, it arrives at tick 4 -> two stale actions dropped
    assert tl.merge(_chunk([20, 21, 22]), start=2, from_tick=4, chunk_id=2) == 2
    assert _plan(tl, range(6)) == [1, 2, 10, 11, 22, None]
    assert tl.remaining_after(1) == 3 and tl.remaining_after(4) == 0


def test_blend_mixes_overlap_only():
    tl = ActionTimeline("blend", blend_weight=0.25)
    tl.merge(_chunk([0, 0, 0, 0]), start=0, from_tick=0, chunk_id=0)
    tl.merge(_chunk([4, 4, 4, 4]), start=2, from_tick=2, chunk_id=1)
    assert _plan(tl, range(7)) == [0, 0, 1, 1, 4, 4, None]


def test_temporal_ensemble_weights_oldest_most():
    tl = ActionTimeline("ensemble", ensemble_m=np.log(2.0))  # weights 1, 1/2, 1/4
    tl.merge(_chunk([0, 0, 0]), start=0, from_tick=0, chunk_id=0)
    tl.merge(_chunk([3, 3, 3]), start=1, from_tick=1, chunk_id=1)
    tl.merge(_chunk([7, 7]), start=2, from_tick=2, chunk_id=2)
    assert _plan(tl, [0, 1])[0] == 0
    assert tl.action(1)[0][0] == pytest.approx(3 * 0.5 / 1.5)
    assert tl.action(2)[0][0] == pytest.approx((0 + 3 * 0.5 + 7 * 0.25) / 1.75)
    assert tl.action(2)[1] == 2  # newest contributing chunk


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="Unknown merge mode"):
        ActionTimeline("average")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="blend_weight"):
        ActionTimeline("blend", blend_weight=2.0)
    with pytest.raises(ValueError, match=r"\[H, A\]"):
        ActionTimeline().merge(np.zeros(3), 0, 0, 0)


def test_roll_forward_absolute_and_delta():
    state = np.array([1.0, 2.0])
    pending = np.array([[0.5, 0.5], [3.0, -1.0]])
    np.testing.assert_array_equal(roll_forward(state, pending, "absolute"), [3.0, -1.0])
    np.testing.assert_array_equal(roll_forward(state, pending, "delta"), [4.5, 1.5])
    np.testing.assert_array_equal(roll_forward(state, pending, "none"), state)
    np.testing.assert_array_equal(roll_forward(state, np.zeros((0, 2)), "absolute"), state)
    with pytest.raises(ValueError, match="Unknown future-state mode"):
        roll_forward(state, pending, "sum")  # type: ignore[arg-type]


def test_conditioner_replaces_only_the_state_part():
    cond = FutureStateConditioner("absolute", slice(1, 3))
    obs = np.array([9.0, 0.0, 0.0, 7.0], np.float32)
    out = cond(obs, np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(out, [9.0, 1.0, 2.0, 7.0])
    np.testing.assert_array_equal(obs, [9.0, 0.0, 0.0, 7.0])  # input untouched
    mapped = FutureStateConditioner("delta", [0], group="policy")({"policy": np.zeros(2), "image": "img"}, [[1.0]])
    assert mapped["image"] == "img" and mapped["policy"][0] == 1.0
    with pytest.raises(ValueError, match="state_index"):
        cond(obs, np.array([[1.0, 2.0, 3.0]]))


def test_latency_estimate_excludes_warmup_and_uses_p95():
    est = LatencyEstimator(initial_s=0.1, warmup=2, quantile=0.95, min_samples=3)
    assert est.delay_ticks(0.02) == 5
    for latency in (1.0, 1.0, 0.05, 0.05):
        est.record(latency)
    assert est.estimate_s() == 0.1  # only two post-warm-up samples yet
    for _ in range(18):
        est.record(0.05)
    est.record(0.09)
    est.record(0.09)  # 2 of 22 samples: the p95 lies between 0.05 and 0.09
    assert 0.05 < est.estimate_s() < 0.09
    assert est.delay_ticks(0.02) == 5  # ceil(0.088 / 0.02)
    assert LatencyEstimator(0.001).delay_ticks(0.02) == 1
    with pytest.raises(ValueError, match="finite"):
        est.record(float("nan"))
