"""State column specs -> indices, and a critic that reads only the selected columns."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, load_progress_model, save_progress_model
from rslkit.rewards.state_columns import select_state_columns
from tests.rewards.toy_progress import GOALS

NAMES = ["j0.pos", "j1.pos", "j0.vel", "j1.vel", "ee.x", "ee.y", "last_action.j0", "last_action.j1"]


def test_indices_ranges_and_globs_select_sorted_distinct_columns():
    assert select_state_columns("", 8, NAMES) == tuple(range(8))
    assert select_state_columns("4:6, 1,0", 8) == (0, 1, 4, 5)
    assert select_state_columns(":2", 8) == (0, 1) and select_state_columns("6:", 8) == (6, 7)
    assert select_state_columns("*.pos,ee.*", 8, NAMES) == (0, 1, 4, 5)
    assert select_state_columns("j1.*,1", 8, NAMES) == (1, 3)


def test_bad_specs_get_a_clear_error():
    with pytest.raises(ValueError, match="matches none"):
        select_state_columns("target.*", 8, NAMES)
    with pytest.raises(ValueError, match="have no names"):
        select_state_columns("ee.*", 8)
    with pytest.raises(ValueError, match=r"outside the state's 8 columns"):
        select_state_columns("6:10", 8)
    with pytest.raises(ValueError, match=r"\[-1\] .* outside"):
        select_state_columns("-1", 8)
    with pytest.raises(ValueError, match="selects no column"):
        select_state_columns("5:2", 8)
    with pytest.raises(ValueError, match="3 state column names"):
        select_state_columns("0", 8, NAMES[:3])


def _frames(state: torch.Tensor) -> TensorDict:
    return TensorDict({"policy": state}, [state.shape[0]])


def test_a_critic_reads_only_its_columns_and_keeps_them_through_save_and_load(tmp_path):
    torch.manual_seed(0)
    cfg = ProgressModelCfg(cameras=(), state_group="policy", state_dim=4, state_columns=(0, 2), feature_dim=16)
    model = ProgressModel(cfg)
    model.fit_goals(GOALS)
    states = torch.randn(64, 4)
    model.encoder.fit_state_stats(states)
    assert torch.allclose(model.encoder.state_mean, states[:, [0, 2]].mean(0))
    a, b = torch.randn(5, 4), torch.randn(5, 4)
    moved = b.clone()
    moved[:, [1, 3]] += 10.0  # the columns the critic does not read
    score, same = model.score(_frames(a), _frames(b), GOALS[0]), model.score(_frames(a), _frames(moved), GOALS[0])
    assert torch.equal(score.delta, same.delta) and torch.equal(score.done, same.done)
    b[:, 0] += 1.0
    assert not torch.equal(model.score(_frames(a), _frames(b), GOALS[0]).delta, score.delta)
    loaded, _ = load_progress_model(save_progress_model(model, tmp_path / "critic.safetensors"))
    assert loaded.cfg.state_columns == (0, 2)
    assert torch.equal(
        loaded.score(_frames(a), _frames(b), GOALS[0]).done, model.score(_frames(a), _frames(b), GOALS[0]).done
    )
    with pytest.raises(ValueError, match="distinct indices below state_dim 4"):
        ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=4, state_columns=(0, 4)))
