"""rslkit's SmolVLA against LeRobot's own (0.4.4) on the committed fixtures: the flow loss with fixed noise and
time, the sampled chunk with fixed noise (with and without the prefix KV cache), tokenization, and the whole
raw-units path through LeRobot's pre/post-processors. Tolerance 1e-5 in float32."""

import pytest
import torch
import torch.nn.functional as F

from tests.models.smolvla.fixture_policy import INSTRUCTIONS, SPECS, load, model_inputs, raw_obs

NAMES = sorted(SPECS)


@pytest.fixture(scope="module", params=NAMES)
def loaded(request):
    torch.manual_seed(0)
    return load(request.param)


def test_flow_loss_matches_lerobot(loaded):
    policy, data = loaded
    inputs = model_inputs(policy, data)
    x1 = F.pad(data["actions_n"], (0, policy.action_dim - data["actions_n"].shape[2]))
    with torch.no_grad():
        losses = policy.net.lerobot_losses(policy.conditioning(inputs), x1, data["noise"], data["time"])
        # rslkit's rectified-flow form of the same loss: x0 = noise, t = 1 - tau, target x1 - x0
        t = 1.0 - data["time"]
        x_t = t.view(-1, 1, 1) * x1 + (1 - t.view(-1, 1, 1)) * data["noise"]
        rectified = ((policy.net(x_t, t, policy.conditioning(inputs)) - (x1 - data["noise"])) ** 2).mean()
    assert (losses - data["losses"]).abs().max() < 1e-5
    assert abs(float(losses.mean()) - float(data["loss"])) < 1e-5
    assert abs(float(rectified) - float(data["loss"])) < 1e-5


@pytest.mark.parametrize("use_cache", [True, False])
def test_sampled_chunk_matches_lerobot(loaded, use_cache):
    policy, data = loaded
    policy.cfg.smolvla.use_cache = use_cache
    try:
        with torch.no_grad():
            chunk = policy.sample_normalized(model_inputs(policy, data), x0=data["noise"])
    finally:
        policy.cfg.smolvla.use_cache = True
    assert chunk.shape == data["noise"].shape
    assert (chunk[..., : data["chunk"].shape[2]] - data["chunk"]).abs().max() < 1e-5


def test_raw_units_match_lerobot_processors(loaded):
    """Raw state, uint8 images and instruction strings -> rslkit's tokenizer, normalizer and padding -> chunk in
    robot units, against LeRobot's preprocessor -> policy -> postprocessor."""
    policy, data = loaded
    with torch.no_grad():
        chunk = policy.act_chunk(raw_obs(policy, data), x0=data["noise"])
    assert chunk.shape == data["chunk_raw"].shape
    assert (chunk - data["chunk_raw"]).abs().max() < 1e-5


def test_tokens_match_lerobot_tokenizer_step(loaded):
    policy, data = loaded
    encoded = policy.encode_instructions(INSTRUCTIONS)
    length = policy.lerobot.tokenizer_max_length
    ids, mask = encoded[:, :length], encoded[:, length:].bool()
    n = data["tokens"].shape[1]  # LeRobot pads to the longest instruction in one of the configs
    assert torch.equal(ids[:, :n], data["tokens"]) and torch.equal(mask[:, :n], data["token_mask"].bool())
    assert not mask[:, n:].any()
