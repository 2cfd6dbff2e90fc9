"""LeRobot checkpoint directories in and out: saving writes what LeRobot writes, a saved policy loads back with the
same outputs, and a directory or VLM that does not fit is refused with a message that names the fix."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from rslkit.models.smolvla.policy import SmolVLAPolicy
from rslkit.utils.validation import ConfigError
from tests.models.smolvla.fixture_policy import FIXTURES, VLM, load, policy_cfg, raw_obs
from tests.models.smolvla.save_for_lerobot import fine_tuned

NAME = "interleaved_1cam"


def test_saving_an_unchanged_checkpoint_writes_lerobots_files(tmp_path):
    policy, _ = load(NAME)
    out = policy.save_lerobot(tmp_path / "ckpt")
    source = FIXTURES / NAME
    ours, theirs = load_file(out / "model.safetensors"), load_file(source / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    for name in ("config.json", "policy_preprocessor.json", "policy_postprocessor.json"):
        assert json.loads((out / name).read_text()) == json.loads((source / name).read_text()), name
    for name in ("policy_preprocessor_step_5_normalizer_processor.safetensors",
                 "policy_postprocessor_step_0_unnormalizer_processor.safetensors"):  # fmt: skip
        saved, stored = load_file(out / name), load_file(source / name)
        for key, value in saved.items():  # mean and std (LeRobot's file also keeps min and max)
            assert torch.equal(value, stored[key]), key


def test_fine_tuned_lora_policy_round_trips(tmp_path):
    policy, data = fine_tuned()
    out = policy.save_lerobot(tmp_path / "ckpt")
    assert not any("lora" in k or "base_layer" in k for k in load_file(out / "model.safetensors"))
    cfg = policy_cfg(NAME)
    cfg.smolvla.pretrained = str(out)
    loaded = SmolVLAPolicy(policy.obs_dim, policy.raw_action_dim, cfg).eval()
    with torch.no_grad():
        before = policy.act_chunk(raw_obs(policy, data), x0=data["noise"])
        after = loaded.act_chunk(raw_obs(loaded, data), x0=data["noise"])
    assert (before - after).abs().max() < 1e-5  # LoRA merged into the base weights on save
    assert torch.equal(loaded.action_normalizer.std, policy.action_normalizer.std)
    assert not torch.equal(loaded.action_normalizer.std, load(NAME)[0].action_normalizer.std)


def _copy(tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / NAME, target)
    return target


def _build(cfg):
    return SmolVLAPolicy(6, 6, cfg)


def test_a_directory_without_config_json_is_refused(tmp_path):
    cfg = policy_cfg(NAME)
    cfg.smolvla.pretrained = str(tmp_path)
    with pytest.raises(FileNotFoundError, match="no config.json.*--agent.policy.smolvla.pretrained"):
        _build(cfg)


def test_a_policy_type_other_than_smolvla_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "type": "act"}))
    cfg = policy_cfg(NAME)
    cfg.smolvla.pretrained = str(ckpt)
    with pytest.raises(ValueError, match="LeRobot 'act' policy.*'smolvla' checkpoints only"):
        _build(cfg)


def test_a_checkpoint_without_weights_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    (ckpt / "model.safetensors").unlink()
    cfg = policy_cfg(NAME)
    cfg.smolvla.pretrained = str(ckpt)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        _build(cfg)


def test_a_vlm_whose_config_does_not_match_the_weights_is_refused(tmp_path):
    vlm = tmp_path / "vlm"
    shutil.copytree(VLM, vlm)
    config = json.loads((vlm / "config.json").read_text())
    config["text_config"]["intermediate_size"] = 48
    (vlm / "config.json").write_text(json.dumps(config))
    cfg = policy_cfg(NAME)
    cfg.backbone_path = str(vlm)
    with pytest.raises(
        ValueError, match=r"do not fit.*mlp.*\[64, 32\] in the checkpoint but \[48, 32\].*backbone_path"
    ):
        _build(cfg)


def test_settings_that_contradict_the_checkpoint_are_refused(tmp_path):
    cfg = policy_cfg(NAME)
    cfg.horizon = 16
    with pytest.raises(ValueError, match="horizon is 16 but the checkpoint .* has 5: set --agent.policy.horizon 5"):
        _build(cfg)
    cfg = policy_cfg(NAME)
    cfg.backbone = "cnn"
    with pytest.raises(ConfigError, match="smolvla.pretrained.*--agent.policy.backbone smolvla"):
        cfg.check()
