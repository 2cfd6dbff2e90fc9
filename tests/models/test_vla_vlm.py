"""The ``hf-vlm`` backbone: a tiny SmolVLM / Idefics3 built from a config and saved (nothing downloads), its first
text decoder layers run bidirectionally over ``[camera tokens, instruction, state]``; the kept weights and hidden
states equal transformers', frozen / LoRA / last-N training, a learning check, ONNX parity and clear errors."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg  # noqa: E402
from rslkit.deploy.export import export_policy  # noqa: E402
from rslkit.deploy.onnx_policy import OnnxPolicy  # noqa: E402
from rslkit.models.flow.objectives import rectified_flow_loss  # noqa: E402
from rslkit.models.vla import INSTRUCTION_GROUP, HFVLMTokenizer, VLAPolicy, VLAPolicyCfg  # noqa: E402
from rslkit.utils.validation import ConfigError  # noqa: E402
from tests.models.hf_vla import normalized_policy, two_camera_obs  # noqa: E402

SMALL = dict(d_model=32, num_heads=4, num_layers=2, token_grid=2, time_embed_dim=16, horizon=5)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
              patch_size=8)  # fmt: skip
TEXT = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=500)  # fmt: skip
CLASSES = {"smolvlm": ("SmolVLMConfig", "SmolVLMForConditionalGeneration", "SmolVLMModel"),
           "idefics3": ("Idefics3Config", "Idefics3ForConditionalGeneration", "Idefics3Model")}  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Saved tiny VLMs (32 px, 8 px patches, pixel shuffle by 2: a 2x2 grid of 64-wide tokens; a 3-layer Llama
    decoder) and a SigLIP vision model (not a VLM)."""
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    for name, (config, model, _) in CLASSES.items():
        cfg = getattr(transformers, config)(text_config=TEXT, vision_config=VISION, scale_factor=2, image_token_id=499)
        getattr(transformers, model)(cfg).save_pretrained(root / name)
    transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**VISION)).save_pretrained(root / "siglip")
    return root


def _cfg(path, **kw) -> VLAPolicyCfg:
    base = dict(cameras=("front", "wrist"), image_size=(16, 16), language_dim=8, backbone="hf-vlm", vlm_layers=2)
    return VLAPolicyCfg(**{**SMALL, **base, "backbone_path": str(path), **kw})


def _policy(path, **kw) -> VLAPolicy:
    return normalized_policy(_cfg(path, **kw))


_obs = two_camera_obs


def _vlm(policy: VLAPolicy) -> HFVLMTokenizer:
    assert policy.tokenizer.vlm is not None
    return policy.tokenizer.vlm


def _pretrained_state(policy: VLAPolicy) -> dict[str, torch.Tensor]:
    vlm = _vlm(policy)
    parts = {"tower": vlm.tower, "decoder": vlm.decoder}
    return {f"{p}.{k}": v.clone() for p, m in parts.items() for k, v in m.state_dict().items()}


def _reference(models, name: str):
    """The saved VLM's text decoder, loaded by transformers itself."""
    cls = getattr(transformers, CLASSES[name][2])
    return cls.from_pretrained(models / name, local_files_only=True, attn_implementation="sdpa").eval()


@pytest.mark.parametrize("name", ["smolvlm", "idefics3"])
def test_the_kept_decoder_layers_are_the_checkpoints_and_the_tokens_have_the_prefix_layout(models, name):
    policy = _policy(models / name).eval()
    vlm = _vlm(policy)
    reference = _reference(models, name).text_model
    assert len(vlm.decoder.layers) == 2 and vlm.decoder.width == 64 and vlm.tower.grid == 2
    for kept, saved in zip(vlm.decoder.layers, reference.layers[:2], strict=True):
        for (key, value), (_, expected) in zip(kept.state_dict().items(), saved.state_dict().items(), strict=True):
            assert torch.equal(value, expected), key
    assert torch.equal(vlm.decoder.norm.weight, reference.norm.weight)
    assert policy.tokenizer.state is None and policy.tokenizer.language is None  # all tokens come from the VLM
    with torch.no_grad():
        tokens = policy.conditioning(policy.normalize_inputs(_obs()))
    assert tokens.shape == (4, 2 * 2**2 + 2, 32)
    layout = dict(policy.tokenizer.layout())
    assert list(layout) == ["camera_front", "camera_wrist", "instruction", "state"]
    assert (layout["camera_wrist"], layout["state"]) == (slice(4, 8), slice(9, 10))
    pooled = _policy(models / name, token_grid=1, vlm_layers=0).eval()  # the 2x2 grid pooled to one token
    assert len(_vlm(pooled).decoder.layers) == 3
    with torch.no_grad():
        assert pooled.conditioning(pooled.normalize_inputs(_obs())).shape == (4, 2 + 2, 32)


@pytest.mark.parametrize("vlm_layers", [0, 2])
def test_the_decoder_is_the_transformers_text_model_with_full_attention(models, vlm_layers):
    """Same prefix embeddings through our stack and through ``LlamaModel.forward(inputs_embeds=...)`` with an
    all-visible 4D mask (its first ``vlm_layers`` layers): equal hidden states; its default causal forward differs
    (our attention is bidirectional)."""
    policy = _policy(models / "smolvlm", vlm_layers=vlm_layers).eval()
    vlm = _vlm(policy)
    reference = _reference(models, "smolvlm").text_model
    reference.layers = reference.layers[: len(vlm.decoder.layers)]
    obs = policy.normalize_inputs(_obs(3))
    with torch.no_grad():
        prefix = vlm.prefix(obs["state"], obs[INSTRUCTION_GROUP], {c: obs[f"camera_{c}"] for c in ("front", "wrist")})
        assert prefix.shape == (3, 10, 64)
        ours = vlm.decoder(prefix)
        visible = torch.ones(3, 1, 10, 10, dtype=torch.bool)
        expected = reference(inputs_embeds=prefix, attention_mask=visible).last_hidden_state
        causal = reference(inputs_embeds=prefix).last_hidden_state
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
    assert (ours[:, 0] - causal[:, 0]).abs().max() > 1e-3  # the first token sees the later ones


def _train(policy: VLAPolicy, steps: int = 3, obs: TensorDict | None = None) -> FlowBC:
    alg = FlowBC(policy, FlowBCCfg(batch_size=8, learning_rate=1e-2, ema_decay=0.9))
    gen = torch.Generator().manual_seed(0)
    actions = torch.rand(8, 5, 3, generator=gen)
    for i in range(steps):
        alg.update(obs if obs is not None else _obs(8, seed=i), actions)
    return alg


def test_a_frozen_vlm_keeps_its_weights_and_stays_in_eval_mode(models):
    policy = _policy(models / "smolvlm").train()
    vlm = _vlm(policy)
    assert not vlm.tower.training and not vlm.decoder.training and vlm.proj.training
    before = _pretrained_state(policy)
    trained = {"state": vlm.state[0].weight.clone(), "language": vlm.language.weight.clone(), "proj": vlm.proj.weight}
    trained = {k: v.clone() for k, v in trained.items()}
    alg = _train(policy)
    assert all(not p.requires_grad and p.grad is None for m in (vlm.tower, vlm.decoder) for p in m.parameters())
    for model in (policy, alg.ema.model):
        after = _pretrained_state(model)
        assert all(torch.equal(after[k], v) for k, v in before.items())
    assert not torch.equal(vlm.state[0].weight, trained["state"])  # the new embeddings and projection train
    assert not torch.equal(vlm.language.weight, trained["language"])
    assert not torch.equal(vlm.proj.weight, trained["proj"])


def test_lora_adapts_the_vision_model_and_the_decoder_and_changes_only_the_adapters(models):
    policy = _policy(models / "smolvlm", backbone_trainable="lora", lora_rank=4, lora_targets=("q_proj", "o_proj"))
    before = _pretrained_state(policy)
    lora = {k for k in before if "lora_" in k}
    # vision: 2 layers x q_proj (SigLIP's output projection is out_proj); decoder: 2 layers x (q_proj, o_proj)
    assert len([k for k in lora if k.startswith("tower.")]) == 2 * 2
    assert len([k for k in lora if k.startswith("decoder.")]) == 2 * 2 * 2
    vlm = _vlm(policy)
    trainable = {f"{p}.{n}" for p, m in (("tower", vlm.tower), ("decoder", vlm.decoder))
                 for n, q in m.named_parameters() if q.requires_grad}  # fmt: skip
    assert trainable == lora
    _train(policy)
    after = _pretrained_state(policy)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == lora


def test_last_n_trains_only_the_last_decoder_layers_and_the_final_norm(models):
    policy = _policy(models / "smolvlm", backbone_trainable="last:1")
    before = _pretrained_state(policy)
    _train(policy)
    after = _pretrained_state(policy)
    changed = {".".join(k.split(".")[:3]) for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"decoder.layers.1", "decoder.norm.weight"}
    with pytest.raises(ValueError, match="N <= 2"):
        _policy(models / "smolvlm", backbone_trainable="last:3")


def test_the_policy_learns_a_fixed_batch(models):
    policy = _policy(models / "smolvlm", token_grid=1)
    obs, gen = _obs(8, seed=3), torch.Generator().manual_seed(0)
    x1 = policy.action_normalizer(torch.rand(8, 5, 3, generator=gen))

    def loss() -> float:
        policy.eval()
        with torch.no_grad():
            value = rectified_flow_loss(policy, policy.normalize_inputs(obs), x1, torch.Generator().manual_seed(1))
        policy.train()
        return float(value)

    start = loss()
    alg = FlowBC(policy, FlowBCCfg(batch_size=8, learning_rate=3e-3, ema_decay=0.9))
    for _ in range(25):
        alg.update(obs, policy.action_normalizer.unnormalize(x1))
    assert loss() < 0.7 * start


@pytest.mark.parametrize("kw", [{}, {"backbone_trainable": "lora", "lora_targets": ("q_proj", "v_proj", "o_proj")}],
                         ids=["frozen", "lora"])  # fmt: skip
def test_an_hf_vlm_policy_exports_and_matches_torch(models, tmp_path, kw):
    policy = _policy(models / "smolvlm", **kw)
    if kw:
        _train(policy, 2)  # non-zero adapters, so the export must carry them
    policy.eval()
    meta = export_policy(policy, tmp_path / "vla.onnx", "flow-bc")
    assert meta.instruction == {"group": INSTRUCTION_GROUP, "input": "embedding", "dim": 8}
    obs = {k: v.numpy() for k, v in _obs(3, seed=5).items()}
    noise = np.random.default_rng(1).normal(size=(3, 5, 3)).astype(np.float32)
    got = OnnxPolicy(tmp_path / "vla.onnx")(obs, noise)
    with torch.no_grad():
        expected = policy.act_chunk({k: torch.from_numpy(v) for k, v in obs.items()}, torch.from_numpy(noise))
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-4)


def test_bad_hf_vlm_setups_are_refused_with_what_to_do(models):
    with pytest.raises(ValueError, match="'siglip_vision_model' model; hf-vlm.*backbone hf-vision"):
        _policy(models / "siglip")
    with pytest.raises(ValueError, match="vlm_layers 3 or fewer"):
        _policy(models / "smolvlm", vlm_layers=4)
    with pytest.raises(ConfigError, match="language_dim.*instruction token"):
        _cfg(models / "smolvlm", language_dim=0).check()
    with pytest.raises(ConfigError, match="cameras"):
        _cfg(models / "smolvlm", cameras=()).check()
    with pytest.raises(ConfigError, match="backbone_reduce.*'pool'"):
        _cfg(models / "smolvlm", backbone_reduce="shuffle").check()
    with pytest.raises(ConfigError, match="vlm_layers: applies to backbone .hf-vlm. only"):
        _cfg(models / "smolvlm", backbone="hf-vision").check()
    with pytest.raises(ConfigError, match="vlm_layers.*>= 0"):
        _cfg(models / "smolvlm", vlm_layers=-1).check()
    with pytest.raises(ConfigError, match="backbone_path"):
        VLAPolicyCfg(backbone="hf-vlm", cameras=("front",), language_dim=8).check()
    with pytest.raises(ValueError, match=r"token_grid to one of \[1, 2\]"):
        _policy(models / "smolvlm", token_grid=4)


def test_backbone_layers_cuts_the_vision_encoder_of_a_vlm_too(models):
    """``backbone_layers 1`` keeps the first of the tiny VLM's 2 vision encoder layers, before its decoder cut."""
    policy = _policy(models / "smolvlm", backbone_layers=1).eval()
    assert len(_vlm(policy).tower.layers) == 1
    full = _policy(models / "smolvlm").eval()
    assert len(_vlm(full).tower.layers) == 2
    obs = _obs()
    with torch.no_grad():
        cut, kept = (p.conditioning(p.normalize_inputs(obs)) for p in (policy, full))
    assert cut.shape == kept.shape and not torch.allclose(cut, kept)
    with pytest.raises(ValueError, match="backbone_layers 2 or fewer"):
        _policy(models / "smolvlm", backbone_layers=3)
