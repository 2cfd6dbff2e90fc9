"""VLA-style flow policy: token layout and masks, the shared flow loss and sampler, overfitting a few
demonstrations from images + instruction + state, and clear errors for bad input."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.models.flow import euler_sample, rectified_flow_loss, shortcut_loss, time_grid
from rslkit.models.text_encoder import GoalTable, embedding_stats, normalize_embeddings
from rslkit.models.vla import INSTRUCTION_GROUP, KeypointTokenizer, VLAPolicy, VLAPolicyCfg
from rslkit.utils.validation import ConfigError

SMALL = dict(d_model=32, num_heads=4, num_layers=2, cnn_channels=(8, 16), token_grid=2, time_embed_dim=16)


def _policy(**kw) -> VLAPolicy:
    torch.manual_seed(0)
    cfg = VLAPolicyCfg(**{**SMALL, "cameras": ("front", "wrist"), "image_size": (16, 16), "language_dim": 8,
                          "horizon": 5, **kw})  # fmt: skip
    return VLAPolicy(state_dim=6, action_dim=3, cfg=cfg)


def _obs(b: int = 4, seed: int = 1, cameras=("front", "wrist"), size=(16, 16), language_dim: int = 8) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    groups = {"policy": torch.randn(b, 6, generator=g)}
    if language_dim:
        groups[INSTRUCTION_GROUP] = torch.randn(b, language_dim, generator=g)
    for c in cameras:
        groups[f"camera_{c}"] = torch.randint(0, 256, (b, *size, 3), generator=g, dtype=torch.uint8)
    return TensorDict(groups, batch_size=[b])


def test_token_layout_is_state_instruction_then_each_camera():
    policy = _policy()
    layout = policy.tokenizer.layout()
    assert [(n, s.start, s.stop) for n, s in layout] == [
        ("state", 0, 1), ("instruction", 1, 2), ("camera_front", 2, 6), ("camera_wrist", 6, 10)
    ]  # fmt: skip
    tokens = policy.conditioning(policy.normalize_inputs(_obs()))
    assert tokens.shape == (4, 10, 32)
    assert policy.input_groups == ["policy", INSTRUCTION_GROUP, "camera_front", "camera_wrist"]


def test_keypoint_tokens_replace_the_grid_tokens_of_each_camera():
    policy = _policy(image_tokens="keypoints", num_keypoints=5)
    layout = policy.tokenizer.layout()
    assert [(n, s.start, s.stop) for n, s in layout] == [
        ("state", 0, 1), ("instruction", 1, 2), ("camera_front", 2, 7), ("camera_wrist", 7, 12)
    ]  # fmt: skip
    assert policy.conditioning(policy.normalize_inputs(_obs())).shape == (4, 12, 32)
    tokenizer = policy.tokenizer.images["front"]
    assert isinstance(tokenizer, KeypointTokenizer)
    assert tokenizer.coords.shape == (8 * 8, 2)  # 16x16 images: stride 2, then the last convolution at stride 1


def test_keypoint_positions_are_the_expectations_of_the_attention_maps():
    torch.manual_seed(0)
    tokenizer = KeypointTokenizer((4, 4), num_keypoints=2, d_model=8, image_size=(16, 16))
    with torch.no_grad():
        tokenizer.attention.weight.zero_()  # uniform maps: every keypoint at the image centre
        tokenizer.attention.bias.zero_()
        tokenizer.proj.weight.zero_()
        tokenizer.proj.weight[0, 0] = tokenizer.proj.weight[1, 1] = 1.0  # token dims 0-1: the position
        tokenizer.proj.bias.zero_()
    tokens = tokenizer(torch.rand(3, 3, 16, 16))
    assert tokens.shape == (3, 2, 8)
    torch.testing.assert_close(tokens[..., :2], torch.zeros(3, 2, 2), atol=1e-6, rtol=0)


def test_keypoint_tokens_locate_a_small_object_finer_than_a_grid_cell():
    """A 2x2-pixel dot anywhere in a 32x32 image; a linear head on the keypoint tokens regresses its position.
    A grid of 4x4 tokens has cells 0.5 wide (in [-1, 1] units): the keypoints must do far better than a cell."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.randint(0, 31, (n, 2), generator=gen)
        images = torch.zeros(n, 3, 32, 32)
        for i, (x, y) in enumerate(pos.tolist()):
            images[i, :, y : y + 2, x : x + 2] = 1.0
        return images, (pos.float() + 0.5) / 15.5 - 1.0  # the dot's centre in [-1, 1]

    tokenizer = KeypointTokenizer((8, 16), num_keypoints=4, d_model=16, image_size=(32, 32))
    head = torch.nn.Linear(4 * 16, 2)
    opt = torch.optim.Adam([*tokenizer.parameters(), *head.parameters()], lr=3e-3)
    for _ in range(300):
        images, target = batch(32)
        loss = (head(tokenizer(images).flatten(1)) - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    images, target = batch(256)
    with torch.no_grad():
        error = (head(tokenizer(images).flatten(1)) - target).abs().mean()
    assert error < 0.04, f"mean position error {float(error):.3f} (grid tokens: about 0.06; a cell is 0.5 wide)"


@pytest.mark.parametrize("group", ["policy", INSTRUCTION_GROUP, "camera_front", "camera_wrist"])
@pytest.mark.parametrize("image_tokens", ["grid", "keypoints"])
def test_the_velocity_depends_on_every_input(group, image_tokens):
    policy = _policy(image_tokens=image_tokens).eval()
    obs = _obs()
    x, t = torch.randn(4, 5, 3), torch.full((4,), 0.3)
    base = policy.velocity(x, t, policy.normalize_inputs(obs))
    other = obs.clone()
    other[group] = _obs(seed=7)[group]
    changed = policy.velocity(x, t, policy.normalize_inputs(other))
    assert (changed - base).abs().max() > 1e-4


@pytest.mark.parametrize("causal", [True, False])
def test_causal_action_tokens_see_only_earlier_ones(causal):
    policy = _policy(causal_actions=causal).eval()
    inputs = policy.normalize_inputs(_obs())
    x, t = torch.randn(4, 5, 3), torch.full((4,), 0.5)
    x_late = x.clone()
    x_late[:, -1] += 1.0
    v, v_late = policy.velocity(x, t, inputs), policy.velocity(x_late, t, inputs)
    earlier = (v_late[:, :-1] - v[:, :-1]).abs().max()
    assert (v_late[:, -1] - v[:, -1]).abs().max() > 1e-4
    assert earlier < 1e-6 if causal else earlier > 1e-4


def test_flow_loss_and_sampler_are_the_state_only_ones():
    """The objectives and the Euler sampler are shared code: with images and language removed the VLA policy needs
    only the state, and its loss and samples are exactly the formulas evaluated with its velocity net."""
    policy = VLAPolicy(6, 3, VLAPolicyCfg(**SMALL, horizon=5)).eval()
    assert policy.input_groups == ["policy"] and policy.tokenizer.num_tokens == 1
    inputs = policy.normalize_inputs(TensorDict({"policy": torch.randn(8, 6)}, batch_size=[8]))
    x1 = torch.rand(8, 5, 3) * 2 - 1
    loss = rectified_flow_loss(policy, inputs, x1, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    x0, t = torch.randn(x1.shape, generator=g), torch.rand(8, generator=g)
    x_t = t.view(-1, 1, 1) * x1 + (1 - t.view(-1, 1, 1)) * x0
    expected = ((policy.net(x_t, t, policy.conditioning(inputs)) - (x1 - x0)) ** 2).mean()
    torch.testing.assert_close(loss, expected)
    noise = torch.randn(8, 5, 3)
    x = noise
    for tk in time_grid(4):
        x = x + policy.velocity(x, tk.expand(8), inputs) / 4
    torch.testing.assert_close(policy.sample_normalized(inputs, noise, 4), x)
    torch.testing.assert_close(euler_sample(lambda y, s: policy.velocity(y, s, inputs), noise, 4), x)


def test_shortcut_objective_trains_a_step_conditioned_expert():
    policy = _policy(objective="shortcut")
    inputs = policy.normalize_inputs(_obs(8))
    loss, parts = shortcut_loss(policy, inputs, torch.rand(8, 5, 3) * 2 - 1, generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert torch.isfinite(loss) and set(parts) == {"flow_matching", "self_consistency"}
    with pytest.raises(ValueError, match="step-conditioned"):
        policy.net(torch.zeros(1, 5, 3), torch.zeros(1), torch.zeros(1, 10, 32))


def test_a_tiny_vla_overfits_demonstrations_that_differ_only_in_image_or_instruction():
    """Four demos: the action chunk is set by the instruction (which corner) and flipped by the image (bright or
    dark scene); the state is the same in all four. Only a policy that reads both inputs can fit them."""
    torch.manual_seed(0)
    cfg = VLAPolicyCfg(**SMALL, cameras=("front",), image_size=(16, 16), language_dim=4, horizon=4)
    policy = VLAPolicy(6, 2, cfg)
    lang = torch.eye(4)[[0, 1, 0, 1]]
    images = torch.zeros(4, 16, 16, 3, dtype=torch.uint8)
    images[2:] = 255
    obs = TensorDict({"policy": torch.zeros(4, 6), INSTRUCTION_GROUP: lang, "camera_front": images}, batch_size=[4])
    corner = torch.tensor([[0.8, 0.8], [-0.8, 0.8], [-0.8, -0.8], [0.8, -0.8]])
    x1 = corner.view(4, 1, 2).expand(4, 4, 2).contiguous()
    inputs = policy.normalize_inputs(obs)
    batch = torch.cat([inputs] * 16)  # 16 copies: fresh noise and times for each
    opt = torch.optim.Adam(policy.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(400):
        loss = rectified_flow_loss(policy, batch, x1.repeat(16, 1, 1), generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-20:]) / 20 < 0.1 * sum(losses[:20]) / 20
    policy.eval()
    with torch.no_grad():
        chunks = torch.stack([policy.sample_normalized(inputs, num_steps=8) for _ in range(4)])
    per_demo = chunks.mean(dim=(0, 2))  # [4, 2]: each demo's mean action over samples and the chunk
    nearest = torch.cdist(per_demo, corner).argmin(dim=1)
    assert nearest.tolist() == [0, 1, 2, 3]  # every demo's own corner, from its own image and instruction
    assert (per_demo - corner).abs().max() < 0.3


def test_bad_input_is_refused_with_what_to_do():
    policy = _policy()
    with pytest.raises(ValueError, match=r"camera_wrist.*missing|missing.*camera_wrist"):
        policy.normalize_inputs(_obs(cameras=("front",)))
    with pytest.raises(ValueError, match="16x16"):
        policy.normalize_inputs(_obs(size=(32, 32)))
    bad = _obs()
    bad["camera_front"] = bad["camera_front"].float()
    with pytest.raises(ValueError, match="uint8"):
        policy.normalize_inputs(bad)
    with pytest.raises(ValueError, match="language_dim"):
        policy.normalize_inputs(_obs(language_dim=5))
    with pytest.raises(ValueError, match=INSTRUCTION_GROUP):
        policy.normalize_inputs(_obs(language_dim=0))
    with pytest.raises(ValueError, match="future-state"):
        policy.conditioning(policy.normalize_inputs(_obs()), torch.zeros(4, 6))


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"d_model": 30}, "d_model"),
        ({"cameras": ("front", "front")}, "cameras"),
        ({"image_size": (4, 4)}, "image_size"),
        ({"token_grid": 3}, "token_grid"),  # a 4x4 feature map pooled to 3x3 (no ONNX export)
        ({"backbone": "vit"}, "backbone"),
        ({"backbone": "hf-vision"}, "backbone_path"),  # a pretrained backbone needs a model directory
        ({"backbone_trainable": "last:0"}, "backbone_trainable"),
        ({"backbone_trainable": "partial"}, "backbone_trainable"),
        ({"backbone_layers": -1}, "backbone_layers"),
        ({"backbone_reduce": "max"}, "backbone_reduce"),
        ({"lora_rank": 0}, "lora_rank"),
        ({"lora_dropout": 1.0}, "lora_dropout"),
        ({"image_tokens": "patches"}, "image_tokens"),
        ({"image_tokens": "keypoints", "num_keypoints": 0}, "num_keypoints"),
        ({"image_tokens": "keypoints", "backbone": "hf-vision", "backbone_path": "x"}, "image_tokens"),
    ],
)
def test_bad_architecture_is_refused_naming_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        _policy(**kw)


def test_weights_round_trip_through_a_state_dict():
    a, b = _policy(), _policy()
    torch.manual_seed(5)
    b = VLAPolicy(6, 3, a.cfg)
    obs = _obs()
    x, t = torch.randn(4, 5, 3), torch.full((4,), 0.2)
    assert not torch.allclose(a.velocity(x, t, a.normalize_inputs(obs)), b.velocity(x, t, b.normalize_inputs(obs)))
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a.velocity(x, t, a.normalize_inputs(obs)), b.velocity(x, t, b.normalize_inputs(obs)))


def test_instructions_are_normalised_as_the_reward_model_normalises_goals():
    """One normalisation of sentence embeddings: the VLA policy's instruction input and the GoalTable agree."""
    raw = torch.randn(3, 4) * torch.tensor([1.0, 0.5, 1e-5, 2.0]) + 0.3
    policy = VLAPolicy(6, 3, VLAPolicyCfg(**SMALL, language_dim=4))
    policy.set_instruction_stats(raw)
    table = GoalTable(4)
    table.fit(["a", "b", "c"], raw)
    torch.testing.assert_close(policy.normalize_instruction(raw), table.lookup(["a", "b", "c"]))
    mean, std = embedding_stats(raw)
    assert float(std[2]) == pytest.approx(1e-3)  # a dimension where all instructions agree is floored, not blown up
    torch.testing.assert_close(normalize_embeddings(raw, mean, std).mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    one_mean, one_std = embedding_stats(raw[:1])  # a single instruction: centred, not scaled
    assert torch.equal(one_mean, raw[0]) and torch.equal(one_std, torch.ones(4))
    with pytest.raises(ValueError, match=r"\[G >= 1, E\]"):
        embedding_stats(raw[0])
