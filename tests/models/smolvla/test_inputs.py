"""SmolVLA's inputs against hand-built batches: camera mapping, empty cameras, resizing with padding, state and
action padding with MEAN_STD statistics, tokenization limits."""

import pytest
import torch

from rslkit.envs.camera_groups import camera_group
from rslkit.models.smolvla.inputs import prepare_images, resize_with_pad
from rslkit.models.smolvla.policy import SmolVLAPolicy
from rslkit.models.vla.policy import INSTRUCTION_GROUP
from tests.models.smolvla.fixture_policy import INSTRUCTIONS, io, load, policy_cfg, raw_obs


@pytest.fixture(scope="module")
def cross():
    return load("cross_2cam")


def test_a_dataset_camera_feeds_the_checkpoint_camera_it_is_mapped_to():
    data = io("interleaved_1cam")
    cfg = policy_cfg("interleaved_1cam", camera_map=("gripper_cam=top",), policy={})
    cfg.cameras = ("gripper_cam",)
    policy = SmolVLAPolicy(6, 6, cfg).eval()
    obs = raw_obs(policy, data)
    assert camera_group("gripper_cam") in obs.keys()
    inputs = policy.normalize_inputs(obs)
    assert camera_group("top") in inputs.keys() and camera_group("gripper_cam") not in inputs.keys()
    with torch.no_grad():
        chunk = policy.act_chunk(obs, x0=data["noise"])
    assert (chunk - data["chunk_raw"]).abs().max() < 1e-5


def test_a_dataset_camera_the_checkpoint_lacks_is_refused():
    cfg = policy_cfg("interleaved_1cam")
    cfg.cameras = ("side",)
    with pytest.raises(ValueError, match="'side' feeds the checkpoint camera 'side'.*camera_map side=<one of top>"):
        SmolVLAPolicy(6, 6, cfg)
    cfg = policy_cfg("interleaved_1cam", camera_map=("wrist=top",))
    with pytest.raises(ValueError, match=r"camera_map maps \['wrist'\], which are not among"):
        SmolVLAPolicy(6, 6, cfg)


def test_empty_cameras_are_minus_one_images_with_false_masks(cross):
    policy, _ = cross
    lr = policy.lerobot
    assert lr.cameras == ("front", "wrist") and lr.empty_cameras == 1
    front = torch.rand(2, 3, 32, 32)
    images, masks = prepare_images({"front": front}, lr.cameras, lr.resize_imgs_with_padding, lr.empty_cameras)
    assert len(images) == 2  # the unfed wrist camera is left out, one configured empty camera is added
    torch.testing.assert_close(images[0], front * 2 - 1)
    assert torch.equal(images[1], -torch.ones_like(front))
    assert masks[0].all() and not masks[1].any()


def test_an_unfed_checkpoint_camera_changes_nothing_but_is_announced():
    data = io("cross_2cam")
    cfg = policy_cfg("cross_2cam")
    cfg.cameras = ("front",)
    with pytest.warns(UserWarning, match=r"cameras \['wrist'\] get no images"):
        policy = SmolVLAPolicy(5, 4, cfg).eval()
    cache = policy.conditioning(policy.normalize_inputs(raw_obs(policy, data)))
    # front (4 tokens) + the empty camera (4 padding tokens) + 16 language tokens + the state token
    assert cache.pad.shape == (2, 25) and not cache.pad[:, 4:8].any() and cache.pad[:, :4].all()


def test_resize_with_pad_keeps_the_aspect_ratio_and_pads_top_left():
    image = torch.rand(1, 3, 24, 40)
    out = resize_with_pad(image, 32, 32, pad_value=0.0)
    assert out.shape == (1, 3, 32, 32)
    assert torch.equal(out[:, :, :13], torch.zeros(1, 3, 13, 32))  # 24 * 32 / 40 = 19.2 -> 19 rows, 13 padded
    assert out[:, :, 13:].abs().sum() > 0


def test_state_and_actions_are_normalized_then_zero_padded(cross):
    policy, data = cross
    state = data["state_raw"]
    inputs = policy.normalize_inputs(raw_obs(policy, data))
    mean, std = policy.obs_normalizer.mean, policy.obs_normalizer.std
    assert inputs["state"].shape == (2, 10)
    torch.testing.assert_close(inputs["state"][:, :5], (state - mean) / (std + 1e-8))
    assert torch.equal(inputs["state"][:, 5:], torch.zeros(2, 5))
    torch.testing.assert_close(inputs["state"][:, :5], data["state_n"])  # LeRobot's normalizer step
    actions = data["actions_raw"]
    padded = policy.action_normalizer(actions)
    assert padded.shape == (2, 4, 8) and torch.equal(padded[..., 4:], torch.zeros(2, 4, 4))
    torch.testing.assert_close(policy.action_normalizer.unnormalize(padded), actions)


def test_an_instruction_longer_than_tokenizer_max_length_is_refused(cross):
    policy, _ = cross
    assert policy.encode_instructions(INSTRUCTIONS).shape == (2, 32)
    long = "pick the red cube and then place the green block into the blue bowl on the left"
    with pytest.raises(ValueError, match="is 17 tokens.*tokenizer_max_length = 16.*shorten"):
        policy.encode_instructions([long])


def test_wrong_instruction_input_is_refused(cross):
    policy, data = cross
    obs = raw_obs(policy, data)
    obs[INSTRUCTION_GROUP] = torch.zeros(2, 384)
    with pytest.raises(ValueError, match="token ids long"):
        policy.normalize_inputs(obs)
