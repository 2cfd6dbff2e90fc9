"""Pretrained vision backbones of the VLA policy: tiny SigLIP and SmolVLM / Idefics3 checkpoints built from configs
and saved to disk (nothing downloads), loaded through the policy config; tokens equal to the transformers forward,
frozen / last-layers / LoRA training, clear errors, ONNX parity and a behaviour-cloning run with a frozen tower."""

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg  # noqa: E402
from rslkit.deploy.export import export_policy  # noqa: E402
from rslkit.deploy.onnx_policy import OnnxPolicy  # noqa: E402
from rslkit.models.vla import VisionTower, VLAPolicy, VLAPolicyCfg  # noqa: E402
from rslkit.models.vla.hf_backbone import reduce_grid, resolve_model_dir  # noqa: E402
from rslkit.recipes.run import build_run  # noqa: E402
from rslkit.runners.pretrain_runner import PretrainRunner  # noqa: E402
from rslkit.runners.vla_bc_data import VLABCRunnerCfg  # noqa: E402
from rslkit.utils.validation import ConfigError  # noqa: E402
from tests.models.hf_vla import normalized_policy, two_camera_obs  # noqa: E402

SMALL = dict(d_model=32, num_heads=4, num_layers=2, token_grid=2, time_embed_dim=16, horizon=5)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2)
TEXT = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1000)  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Saved tiny checkpoints: ``siglip`` (32 px, 8 px patches: a 4x4 grid, with a preprocessor config),
    ``smolvlm`` and ``idefics3`` (64 px, 16 px patches, pixel shuffle by 2: a 2x2 grid of 64-wide tokens)."""
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    siglip = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**VISION, image_size=32, patch_size=8))
    siglip.save_pretrained(root / "siglip")
    (root / "siglip" / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2, 0.25, 0.3]})
    )
    vlm = dict(text_config=TEXT, vision_config={**VISION, "image_size": 64, "patch_size": 16}, scale_factor=2,
               image_token_id=999)  # fmt: skip
    smol = transformers.SmolVLMForConditionalGeneration(transformers.SmolVLMConfig(**vlm))
    smol.save_pretrained(root / "smolvlm")
    idefics = transformers.Idefics3ForConditionalGeneration(transformers.Idefics3Config(**vlm))
    idefics.save_pretrained(root / "idefics3")
    assert sum(p.numel() for p in smol.parameters()) < 500_000  # a tiny model of the SmolVLM class
    return root


def _cfg(path, **kw) -> VLAPolicyCfg:
    base = dict(cameras=("front", "wrist"), image_size=(16, 16), language_dim=8, backbone="hf-vision")
    return VLAPolicyCfg(**{**SMALL, **base, "backbone_path": str(path), **kw})


def _policy(path, **kw) -> VLAPolicy:
    return normalized_policy(_cfg(path, **kw))


_obs = two_camera_obs


def _tower_state(policy: VLAPolicy) -> dict[str, torch.Tensor]:
    assert policy.tokenizer.backbone is not None
    return {k: v.clone() for k, v in policy.tokenizer.backbone.tower.state_dict().items()}


def test_siglip_tokens_are_the_transformers_forward_pooled_and_projected(models):
    policy = _policy(models / "siglip").eval()
    backbone = policy.tokenizer.backbone
    assert backbone is not None and backbone.tower.grid == 4 and backbone.num_tokens == 4
    torch.testing.assert_close(backbone.mean.flatten(), torch.tensor([0.4, 0.5, 0.6]))
    torch.testing.assert_close(backbone.std.flatten(), torch.tensor([0.2, 0.25, 0.3]))
    reference = transformers.SiglipVisionModel.from_pretrained(models / "siglip", local_files_only=True).eval()
    images = torch.rand(3, 3, 16, 16)
    pixels = backbone.preprocess(images)
    assert pixels.shape == (3, 3, 32, 32)  # resized to the tower's image size
    with torch.no_grad():
        expected = reference(pixel_values=pixels).last_hidden_state  # [3, 16, 32]
        torch.testing.assert_close(backbone.tower(pixels), expected)
        cells = expected.view(3, 2, 2, 2, 2, 32).mean(dim=(2, 4)).reshape(3, 4, 32)  # 2x2 cells of the 4x4 grid
        torch.testing.assert_close(backbone(images), backbone.proj(cells))
        tokens = policy.conditioning(policy.normalize_inputs(_obs()))
    assert tokens.shape == (4, 1 + 1 + 2 * 4, 32)
    assert [n for n, _ in policy.tokenizer.layout()] == ["state", "instruction", "camera_front", "camera_wrist"]


def test_each_camera_and_sample_gets_its_own_tokens_from_the_shared_tower(models):
    """Both cameras go through the tower in one batch; their tokens land in their own slots, per sample."""
    policy = _policy(models / "siglip").eval()
    obs = _obs()
    other = obs.clone()
    other["camera_wrist"][1] = 255 - other["camera_wrist"][1]  # only sample 1's wrist image changes
    with torch.no_grad():
        base, changed = (policy.conditioning(policy.normalize_inputs(o)) for o in (obs, other))
    moved = (changed - base).abs().amax(dim=2) > 1e-5  # [B, L]: which tokens changed
    wrist = dict(policy.tokenizer.layout())["camera_wrist"]
    expected = torch.zeros_like(moved)
    expected[1, wrist] = True
    assert torch.equal(moved, expected)


@pytest.mark.parametrize("name", ["smolvlm", "idefics3"])
def test_a_vlm_checkpoint_gives_its_pixel_shuffled_visual_tokens(models, name):
    """The tower of a SmolVLM / Idefics3 checkpoint: the VLM's vision model and connector, the same tokens as the
    VLM's own ``get_image_features`` (4x4 patches, pixel shuffle by 2: 4 tokens of the text width 64)."""
    tower = VisionTower(str(models / name)).eval()
    assert (tower.grid, tower.width, tower.image_size) == (2, 64, 64)
    cls = {"smolvlm": transformers.SmolVLMModel, "idefics3": transformers.Idefics3Model}[name]
    vlm = cls.from_pretrained(models / name, local_files_only=True).eval()
    pixels = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = torch.stack(vlm.get_image_features(pixel_values=pixels[:, None]).pooler_output)
        torch.testing.assert_close(tower(pixels), expected)
    policy = _policy(models / name, token_grid=1).eval()  # 2x2 visual tokens pooled to one per camera
    assert policy.conditioning(policy.normalize_inputs(_obs())).shape == (4, 1 + 1 + 2, 32)


def test_backbone_layers_keeps_the_first_encoder_layers(models):
    full = transformers.SiglipVisionModel.from_pretrained(models / "siglip", local_files_only=True).eval()
    tower = VisionTower(str(models / "siglip"), num_layers=2).eval()
    assert len(tower.layers) == 2
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        hidden = full(pixel_values=pixels, output_hidden_states=True).hidden_states[2]  # after two layers
        torch.testing.assert_close(tower(pixels), full.post_layernorm(hidden))
    with pytest.raises(ValueError, match="backbone_layers 3 or fewer"):
        VisionTower(str(models / "siglip"), num_layers=4)


def test_the_grid_is_reduced_by_pooling_or_pixel_shuffle():
    tokens = torch.arange(16.0).view(1, 16, 1)  # a 4x4 grid, token value = its row-major index
    pooled = reduce_grid(tokens, 4, 2, "pool")
    assert pooled.flatten().tolist() == [2.5, 4.5, 10.5, 12.5]  # e.g. mean of 0, 1, 4, 5
    shuffled = reduce_grid(tokens, 4, 2, "shuffle")
    assert shuffled.shape == (1, 4, 4) and shuffled[0, 0].tolist() == [0, 1, 4, 5]
    assert shuffled[0, 3].tolist() == [10, 11, 14, 15]
    assert reduce_grid(tokens, 4, 4, "pool") is tokens


def test_a_frozen_backbone_gets_no_gradients_and_stays_in_eval_mode(models):
    policy = _policy(models / "siglip", backbone_reduce="shuffle").train()
    backbone = policy.tokenizer.backbone
    assert backbone is not None and backbone.proj.in_features == 32 * 4
    assert not backbone.tower.training and policy.net.training
    policy.conditioning(policy.normalize_inputs(_obs())).square().mean().backward()
    assert all(p.grad is None and not p.requires_grad for p in backbone.tower.parameters())
    assert backbone.proj.weight.grad is not None and backbone.proj.weight.grad.abs().sum() > 0


def _train(policy: VLAPolicy, steps: int = 5) -> FlowBC:
    alg = FlowBC(policy, FlowBCCfg(batch_size=8, learning_rate=1e-2, ema_decay=0.9))
    gen = torch.Generator().manual_seed(0)
    for i in range(steps):
        alg.update(_obs(8, seed=i), torch.rand(8, 5, 3, generator=gen))
    return alg


def test_lora_trains_the_adapters_and_leaves_the_pretrained_weights_bit_identical(models):
    policy = _policy(models / "siglip", backbone_trainable="lora", lora_rank=4, lora_targets=("q_proj", "v_proj"))
    before = _tower_state(policy)
    lora = [k for k in before if "lora_" in k]
    assert len(lora) == 3 * 2 * 2  # 3 layers, q_proj and v_proj, A and B
    trainable = {n for n, p in policy.tokenizer.backbone.tower.named_parameters() if p.requires_grad}
    assert trainable == set(lora)
    alg = _train(policy)
    after = _tower_state(policy)
    for key, value in before.items():
        if key in lora:
            continue
        assert torch.equal(after[key], value), key  # pretrained weights (base_layer, norms, embeddings) unchanged
        assert torch.equal(_tower_state(alg.ema.model)[key], value), key  # and in the EMA copy
    assert all(not torch.equal(after[k], before[k]) for k in lora)  # A and B both moved


def test_last_n_trains_only_the_last_layers(models):
    policy = _policy(models / "siglip", backbone_trainable="last:1")
    before = _tower_state(policy)
    _train(policy)
    after = _tower_state(policy)
    changed = {k.split(".")[0] + "." + k.split(".")[1] for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"layers.2", "post_layernorm.weight", "post_layernorm.bias"}
    with pytest.raises(ValueError, match="N <= 3"):
        _policy(models / "siglip", backbone_trainable="last:4")


def test_missing_or_unsupported_backbones_are_refused_with_what_to_do(models, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hf download.*save_pretrained"):
        _policy(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        resolve_model_dir("someone/not-in-the-cache-vla-backbone")
    with pytest.raises(ConfigError, match="backbone_path"):
        VLAPolicyCfg(backbone="hf-vision").check()
    with pytest.raises(ConfigError, match="backbone_trainable"):
        _cfg(models / "siglip", backbone_trainable="last:two").check()
    with pytest.raises(ValueError, match=r"token_grid to one of \[1, 2, 4\]"):
        _policy(models / "siglip", token_grid=3)
    with pytest.raises(ValueError, match="lora_targets.*fc1"):
        _policy(models / "siglip", backbone_trainable="lora", lora_targets=("query",))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        _policy(tmp_path / "empty")
    text_only = tmp_path / "bert"
    bert = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(bert).save_pretrained(text_only)
    with pytest.raises(ValueError, match="'bert' model"):
        _policy(text_only)


@pytest.mark.parametrize(
    "name,kw",
    [("siglip", {"backbone_trainable": "lora"}), ("smolvlm", {"token_grid": 1, "backbone_reduce": "shuffle"})],
    ids=["siglip-lora", "smolvlm"],
)
def test_a_policy_with_a_pretrained_backbone_exports_and_matches_torch(models, tmp_path, name, kw):
    policy = _policy(models / name, **kw)
    if kw.get("backbone_trainable") == "lora":
        _train(policy, 3)  # non-zero adapters, so the export must carry them
    policy.eval()
    meta = export_policy(policy, tmp_path / "vla.onnx", "vla-bc")
    assert meta.obs_dtypes == {"camera_front": "uint8", "camera_wrist": "uint8"}
    obs = {k: v.numpy() for k, v in _obs(3, seed=5).items()}
    noise = np.random.default_rng(1).normal(size=(3, 5, 3)).astype(np.float32)
    got = OnnxPolicy(tmp_path / "vla.onnx")(obs, noise)
    with torch.no_grad():
        expected = policy.act_chunk({k: torch.from_numpy(v) for k, v in obs.items()}, torch.from_numpy(noise))
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-4)


def test_behaviour_cloning_with_a_frozen_backbone_trains_around_it_and_resumes(models, tmp_path):
    """The VLA runner's optimizer and EMA with a frozen tower: the tower keeps the checkpoint's weights exactly (in
    the trained policy and its EMA copy), the rest trains, and a resumed run restores the same weights."""
    from rslkit.data import record_episodes, write_lerobot_dataset
    from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv, expert

    env = InstructedPointEnv(num_envs=8, seed=0)
    episodes = record_episodes(
        env, expert, 8, task=lambda obs: [INSTRUCTIONS[int(g)] for g in obs["goal"]], cameras=["front"]
    )
    dataset = write_lerobot_dataset(tmp_path / "demos", episodes, fps=10)
    policy = _cfg(models / "siglip", cameras=("front",), language_dim=384, horizon=4)
    cfg = VLABCRunnerCfg(dataset=str(dataset), policy=policy, logger=(), max_iterations=2, updates_per_iteration=3,
                         eval_interval=0, augment_shift=1)  # fmt: skip
    cfg.algorithm.batch_size = 8
    pretrained = transformers.SiglipVisionModel.from_pretrained(models / "siglip", local_files_only=True)
    runner = PretrainRunner(InstructedPointEnv(num_envs=4, seed=1), cfg, tmp_path / "run", run_info={"seed": 0})
    start = {k: v.clone() for k, v in runner.alg.policy.state_dict().items()}
    runner.learn()
    for model in (runner.alg.policy, runner.policy):
        tower = model.tokenizer.backbone.tower
        torch.testing.assert_close(tower.layers[1].mlp.fc1.weight, pretrained.encoder.layers[1].mlp.fc1.weight,
                                   rtol=0, atol=0)  # fmt: skip
        assert all(torch.equal(v, start[f"tokenizer.backbone.tower.{k}"]) for k, v in tower.state_dict().items())
    trained = runner.alg.policy.state_dict()
    assert not torch.equal(trained["tokenizer.backbone.proj.weight"], start["tokenizer.backbone.proj.weight"])
    resumed = PretrainRunner(InstructedPointEnv(num_envs=4, seed=1), cfg, None, run_info={"seed": 0})
    resumed.load(tmp_path / "run" / "model_2.pt")
    for key, value in runner.policy.state_dict().items():
        assert torch.equal(resumed.policy.state_dict()[key], value), key


def test_the_task_recipe_takes_a_backbone_from_the_command_line(models):
    """``train.py --task so101-pick-place --algo vla-bc --agent.policy.backbone hf-vision --agent.policy.backbone_path
    P --agent.policy.image_tokens grid`` builds the run (the recipe's 64x64 camera resized to the tower's 32x32, its
    4x4 grid = token_grid 4); without ``image_tokens grid`` the recipe's keypoint tokens are refused with that fix."""
    policy_flags = {"backbone": "hf-vision", "backbone_path": str(models / "siglip"), "backbone_trainable": "lora",
                    "lora_targets": "q_proj,v_proj"}  # fmt: skip
    overrides = [item for k, v in policy_flags.items() for item in (f"--agent.policy.{k}", v)]
    with pytest.raises(ConfigError, match="--agent.policy.image_tokens grid"):
        build_run("so101-pick-place", "vla-bc", overrides, num_envs=1, agent_fields={"dataset": "unused"})
    policy_flags["image_tokens"] = "grid"
    overrides = [item for k, v in policy_flags.items() for item in (f"--agent.policy.{k}", v)]
    _, runner = build_run("so101-pick-place", "vla-bc", overrides, num_envs=1, agent_fields={"dataset": "unused"})
    policy = runner.alg.policy
    assert isinstance(policy, VLAPolicy) and policy.cfg.lora_targets == ("q_proj", "v_proj")
    backbone = policy.tokenizer.backbone
    assert backbone is not None and backbone.num_tokens == 16
    assert any("lora_A" in name for name, _ in backbone.tower.named_parameters())
