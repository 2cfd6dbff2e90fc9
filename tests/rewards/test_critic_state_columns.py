"""A critic that reads only the state columns :func:`~rslkit.envs.columns.select_state_columns` selected."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, load_progress_model, save_progress_model
from tests.rewards.toy_progress import GOALS


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
