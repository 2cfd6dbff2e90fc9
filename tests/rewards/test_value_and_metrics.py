"""VLAC's value recursion, the dead-band and the critic metrics against hand-computed values."""

import math

import pytest
import torch

from rslkit.rewards.metrics import done_auroc, negative_step_rate, value_order_correlation
from rslkit.rewards.value import ValueCfg, apply_dead_band, done_term, value_step, value_trajectory


def test_value_step_closes_the_gap_on_progress_and_loses_achievement_on_regression():
    v = torch.tensor([0.5, 0.5, 0.0, 1.0, 0.2])
    d = torch.tensor([0.2, -0.2, -0.5, 0.3, 1.0])
    assert torch.allclose(value_step(v, d), torch.tensor([0.6, 0.4, 0.0, 1.0, 1.0]))


def test_value_trajectory_accumulates_from_the_initial_value():
    values = value_trajectory(torch.tensor([0.5, 0.5, -0.5]))
    assert torch.allclose(values, torch.tensor([0.0, 0.5, 0.75, 0.375]))
    batched = value_trajectory(torch.tensor([[0.5, 0.5], [-0.5, 0.5]]), initial=0.5)
    assert torch.allclose(batched, torch.tensor([[0.5, 0.75, 0.875], [0.5, 0.25, 0.625]]))


def test_sum_adds_the_deltas_clipped_to_0_1_where_the_recursion_compresses_them():
    v = torch.tensor([0.5, 0.5, 0.1, 0.9])
    d = torch.tensor([0.2, -0.2, -0.5, 0.3])
    assert torch.allclose(value_step(v, d, "sum"), torch.tensor([0.7, 0.3, 0.0, 1.0]))
    # an exact critic of the pair labels (j - i) / T: T steps of 1 / T
    steps = torch.full((50,), 1 / 50)
    assert value_trajectory(steps, accumulate="sum")[-1] == pytest.approx(1.0, abs=1e-5)
    assert value_trajectory(steps)[-1] == pytest.approx(1 - (1 - 1 / 50) ** 50, abs=1e-5)  # 0.636
    with pytest.raises(ValueError, match="accumulate must be one of"):
        value_step(v, d, "mean")


def test_dead_band_zeroes_small_deltas_only():
    out = apply_dead_band(torch.tensor([0.05, -0.05, 0.2, -0.3]), 0.1)
    assert torch.equal(out, torch.tensor([0.0, 0.0, 0.2, -0.3]))
    assert torch.allclose(value_trajectory(torch.tensor([0.05, 0.5]), dead_band=0.1), torch.tensor([0.0, 0.0, 0.5]))


def test_value_cfg_rejects_bad_settings():
    for bad in ({"dead_band": 1.0}, {"stride": 0}, {"done_threshold": 0.0}, {"accumulate": "max"}, {"scale": 0}):
        with pytest.raises(ValueError):
            ValueCfg(**bad)


def test_voc_is_spearman_with_time():
    assert value_order_correlation([0.0, 1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert value_order_correlation([3.0, 2.0, 1.0, 0.0]) == pytest.approx(-1.0)
    # ranks differ by d = (0, 1, -1, 0): 1 - 6 * 2 / (4 * 15) = 0.8
    assert value_order_correlation([0.0, 2.0, 1.0, 3.0]) == pytest.approx(0.8)
    assert value_order_correlation([0.5, 0.5, 0.5]) == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        value_order_correlation([1.0])


def test_negative_step_rate_and_auroc():
    assert negative_step_rate([0.1, -0.2, -0.01, 0.3], dead_band=0.05) == pytest.approx(0.25)
    # positives 0.9, 0.3 vs negatives 0.8, 0.1: 3 of the 4 pairs ranked right
    assert done_auroc([0.9, 0.8, 0.3, 0.1], [True, False, True, False]) == pytest.approx(0.75)
    assert done_auroc([0.9, 0.1], [True, False]) == 1.0
    assert math.isclose(done_auroc([0.5, 0.5], [True, False]), 0.5)
    with pytest.raises(ValueError, match="done and not-done"):
        done_auroc([0.2, 0.3], [False, False])


def test_done_term_pays_the_probability_or_vices_log_odds():
    d = torch.tensor([0.0, 0.2, 0.5, 0.9, 1.0])
    assert torch.equal(done_term(d, "prob"), d)
    odds = done_term(d, "log_odds")
    expected = [math.log(1e-4 / (1 - 1e-4)), math.log(0.2 / 0.8), 0.0, math.log(9.0), math.log((1 - 1e-4) / 1e-4)]
    assert torch.allclose(odds, torch.tensor(expected), atol=1e-3)  # 1 - 1e-4 in float32
    with pytest.raises(ValueError, match="done_term must be one of"):
        done_term(d, "logit")
    with pytest.raises(ValueError, match="done_term must be one of"):
        ValueCfg(done_term="logit")
