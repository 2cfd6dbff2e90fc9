"""LeRobot's freeze options and LoRA through rslkit's behaviour-cloning step (FlowBC): frozen weights stay
bit-identical, the rest trains; gradient checkpointing changes nothing but memory; bf16 is refused off CUDA."""

import pytest
import torch

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.models.smolvla.tuning import LEROBOT_LORA_TARGETS
from tests.models.smolvla.fixture_policy import load, raw_obs

NAME = "interleaved_1cam"


def _train(policy, data, steps: int = 2) -> dict[str, torch.Tensor]:
    """Weights before ``steps`` FlowBC updates on the fixture batch (the policy is updated in place)."""
    before = {k: v.detach().clone() for k, v in policy.named_parameters()}
    alg = FlowBC(policy, FlowBCCfg(learning_rate=1e-2, batch_size=2), "cpu")
    obs = raw_obs(policy, data)
    for _ in range(steps):
        alg.update(obs, data["actions_raw"])
    return before


def _changed(policy, before) -> set[str]:
    return {k for k, v in policy.named_parameters() if not torch.equal(v, before[k])}


def _group(name: str) -> str:
    for part in ("vision_model", "connector", "text_model", "lm_head", "lm_expert", "state_proj"):
        if part in name:
            return part
    return "projections"


def test_default_trains_the_expert_and_projections_only():
    torch.manual_seed(0)
    policy, data = load(NAME)
    before = _train(policy, data)
    trained = {_group(k) for k in _changed(policy, before)}
    assert trained == {"lm_expert", "state_proj", "projections"}
    assert {_group(k) for k, p in policy.named_parameters() if p.requires_grad} == trained
    policy.train()
    assert not policy.net.vlm_with_expert.vlm.training and policy.net.vlm_with_expert.lm_expert.training


def test_training_the_vlm_keeps_the_vision_encoder_and_state_projection_frozen_when_asked():
    torch.manual_seed(0)
    policy, data = load(NAME, train_expert_only=False, freeze_vision_encoder=True, train_state_proj=False)
    before = _train(policy, data)
    changed = _changed(policy, before)
    assert {_group(k) for k in changed} == {"connector", "text_model", "lm_expert", "projections"}
    assert any("text_model.layers.0.self_attn.q_proj" in k for k in changed)
    policy.train()
    vlm = policy.net.vlm_with_expert.vlm
    assert vlm.model.text_model.training and not vlm.model.vision_model.training


def test_lora_trains_only_the_adapters():
    torch.manual_seed(0)
    policy, data = load(NAME, policy={"backbone_trainable": "lora", "lora_targets": LEROBOT_LORA_TARGETS})
    before = _train(policy, data)
    changed = _changed(policy, before)
    assert changed and all(".lora_" in k for k in changed)
    assert any("lm_expert.layers.1.self_attn.v_proj.lora_B" in k for k in changed)
    assert any("state_proj.lora_B" in k for k in changed)
    assert {k for k, p in policy.named_parameters() if p.requires_grad} == {k for k in before if ".lora_" in k}


def test_lora_targets_that_name_nothing_are_refused():
    with pytest.raises(ValueError, match=r"lora_targets \['out_proj'\] name no linear layer.*LeRobot's default"):
        load(NAME, policy={"backbone_trainable": "lora"})


def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        policy, data = load(NAME, gradient_checkpointing=checkpointing, train_expert_only=False)
        policy.train()
        loss = policy.lerobot_loss(policy.normalize_inputs(raw_obs(policy, data)), data["actions_raw"],
                                   data["noise"], data["time"])  # fmt: skip
        loss.backward()
        grads.append({k: p.grad.clone() for k, p in policy.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for key, grad in grads[0].items():
        torch.testing.assert_close(grads[1][key], grad, rtol=1e-5, atol=1e-7)


def test_bf16_autocast_is_refused_off_cuda():
    policy, data = load(NAME, bf16=True)
    with pytest.raises(ValueError, match="--agent.policy.smolvla.bf16 is bfloat16 autocast on CUDA"):
        policy.act_chunk(raw_obs(policy, data))
