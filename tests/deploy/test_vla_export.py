"""ONNX export of the VLA-style policy: uint8 camera, instruction embedding and state inputs, parity with torch."""

import numpy as np
import pytest
import torch

from rslkit.deploy.export import export_policy, external_data_path
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.models.vla import INSTRUCTION_GROUP, VLAPolicy, VLAPolicyCfg

SMALL = dict(d_model=32, num_heads=4, num_layers=2, cnn_channels=(8, 16), token_grid=2, time_embed_dim=16)


def _policy(**kw) -> VLAPolicy:
    torch.manual_seed(0)
    cfg = VLAPolicyCfg(**{**SMALL, "cameras": ("front", "wrist"), "image_size": (16, 16), "language_dim": 8,
                          "horizon": 5, **kw})  # fmt: skip
    policy = VLAPolicy(6, 3, cfg)
    policy.obs_normalizer.set_stats(-2 * torch.ones(6), 3 * torch.ones(6))
    policy.action_normalizer.set_stats(torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 0.5]))
    return policy.eval()


def _obs(b: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "policy": rng.normal(size=(b, 6)).astype(np.float32),
        INSTRUCTION_GROUP: rng.normal(size=(b, 8)).astype(np.float32),
        "camera_front": rng.integers(0, 256, size=(b, 16, 16, 3), dtype=np.uint8),
        "camera_wrist": rng.integers(0, 256, size=(b, 16, 16, 3), dtype=np.uint8),
    }


@pytest.mark.parametrize(
    "kw",
    [{}, {"causal_actions": True, "objective": "shortcut"}, {"image_tokens": "keypoints", "num_keypoints": 3}],
    ids=["default", "causal", "keypoints"],
)
def test_vla_chunks_match_torch(tmp_path, kw):
    policy = _policy(**kw)
    meta = export_policy(policy, tmp_path / "vla.onnx", "flow-bc")
    assert meta.kind == "chunk" and meta.input_names == ["policy", INSTRUCTION_GROUP, "camera_front", "camera_wrist",
                                                         "noise"]  # fmt: skip
    assert meta.obs_groups["camera_front"] == [16, 16, 3] and meta.obs_dtypes == {"camera_front": "uint8",
                                                                                   "camera_wrist": "uint8"}  # fmt: skip
    assert meta.instruction == {"group": INSTRUCTION_GROUP, "input": "embedding", "dim": 8}
    obs, noise = _obs(3), np.random.default_rng(1).normal(size=(3, 5, 3)).astype(np.float32)
    got = OnnxPolicy(tmp_path / "vla.onnx")(obs, noise)
    with torch.no_grad():
        expected = policy.act_chunk({k: torch.from_numpy(v) for k, v in obs.items()}, torch.from_numpy(noise))
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-4)
    one = OnnxPolicy(tmp_path / "vla.onnx")({k: v[0] for k, v in obs.items()}, noise[0])  # unbatched sample
    np.testing.assert_allclose(one, expected[0].numpy(), rtol=0, atol=1e-4)


def test_external_data_puts_the_weights_beside_the_model(tmp_path, monkeypatch):
    """A pretrained backbone's weights exceed protobuf's 2 GB: they go to ``<out>.data``; parity and metadata hold.
    Forced here, and automatic above the size threshold (lowered for the test)."""
    import rslkit.deploy.export as export_module

    policy = _policy()
    obs, noise = _obs(2), np.random.default_rng(2).normal(size=(2, 5, 3)).astype(np.float32)
    export_policy(policy, tmp_path / "inline.onnx", "flow-bc")
    assert not external_data_path(tmp_path / "inline.onnx").exists()
    inline = OnnxPolicy(tmp_path / "inline.onnx")
    monkeypatch.setattr(export_module, "EXTERNAL_DATA_BYTES", 1000)  # this tiny policy's weights are larger
    meta = export_policy(policy, tmp_path / "vla.onnx", "flow-bc")
    data = external_data_path(tmp_path / "vla.onnx")
    moved = (tmp_path / "inline.onnx").stat().st_size - (tmp_path / "vla.onnx").stat().st_size
    assert moved > 0.9 * data.stat().st_size > 50_000, "the weights moved from the model to the .data file"
    loaded = OnnxPolicy(tmp_path / "vla.onnx")
    assert loaded.meta == meta
    np.testing.assert_array_equal(loaded(obs, noise), inline(obs, noise))
    export_policy(policy, tmp_path / "forced.onnx", "flow-bc", external_data=False)  # never, when told so
    assert not external_data_path(tmp_path / "forced.onnx").exists()


def test_a_vla_without_language_has_no_instruction_input(tmp_path):
    meta = export_policy(_policy(language_dim=0, cameras=("front",)), tmp_path / "v.onnx", "flow-bc")
    assert meta.instruction is None and meta.input_names == ["policy", "camera_front", "noise"]


def test_bad_image_inputs_are_refused(tmp_path):
    export_policy(_policy(), tmp_path / "vla.onnx", "flow-bc")
    onnx_policy = OnnxPolicy(tmp_path / "vla.onnx")
    obs = _obs(2)
    obs["camera_front"] = obs["camera_front"].astype(np.float32)
    with pytest.raises(ValueError, match="uint8"):
        onnx_policy(obs)
    obs = _obs(2)
    obs["camera_wrist"] = np.zeros((2, 32, 32, 3), np.uint8)
    with pytest.raises(ValueError, match="16, 16, 3"):
        onnx_policy(obs)
    obs = _obs(2)
    del obs[INSTRUCTION_GROUP]
    with pytest.raises(ValueError, match=INSTRUCTION_GROUP):
        onnx_policy(obs)
