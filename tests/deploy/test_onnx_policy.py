"""The ONNX Runtime policy rejects bad inputs with clear errors and handles batching and state."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from rslkit.deploy.export import export_checkpoint
from rslkit.deploy.onnx_policy import OnnxPolicy


@pytest.fixture
def step_policy(tmp_path, build) -> OnnxPolicy:
    build.ppo(tmp_path / "model_0.pt")
    export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx")
    return OnnxPolicy(tmp_path / "p.onnx", intra_op_threads=1)


@pytest.fixture
def gru_policy(tmp_path, build) -> OnnxPolicy:
    build.ppo(tmp_path / "model_0.pt", rnn_type="gru", rnn_hidden_dim=4)
    export_checkpoint(tmp_path / "model_0.pt", tmp_path / "r.onnx")
    return OnnxPolicy(tmp_path / "r.onnx")


@pytest.fixture
def chunk_policy(tmp_path, build) -> OnnxPolicy:
    build.flow(tmp_path / "model_0.pt")
    export_checkpoint(tmp_path / "model_0.pt", tmp_path / "c.onnx")
    return OnnxPolicy(tmp_path / "c.onnx")


def test_unbatched_and_mapping_inputs(step_policy):
    obs = np.array([0.5, -0.2, 1.0], np.float32)
    single = step_policy(obs)
    assert single.shape == (1,)
    batched = step_policy({"policy": np.stack([obs, obs])})
    assert batched.shape == (2, 1)
    np.testing.assert_allclose(batched[0], single, atol=1e-6)


@pytest.mark.parametrize(
    "obs, match",
    [
        (np.zeros((2, 3), np.float64), "dtype float64.*astype"),
        (np.zeros((2, 4), np.float32), r"shape \[2, 4\]; expected \[batch, 3\]"),
        (np.zeros((2, 1, 3), np.float32), "shape"),
        (np.array([[0, np.nan, 0], [0, 0, 0]], np.float32), r"non-finite.*rows \[0\]"),
        (np.array([[0, 0, 0], [np.inf, 0, 0]], np.float32), r"non-finite.*rows \[1\]"),
        ({"critic": np.zeros((1, 3), np.float32)}, r"Missing observation groups \['policy'\]"),
    ],
    ids=["float64", "wrong_dim", "extra_axis", "nan", "inf", "missing_group"],
)
def test_bad_inputs_raise_clear_errors(step_policy, obs, match):
    with pytest.raises(ValueError, match=match):
        step_policy(obs)


def test_noise_only_for_chunk_policies(step_policy, chunk_policy):
    with pytest.raises(ValueError, match="noise is an input of chunk policies only"):
        step_policy(np.zeros((1, 3), np.float32), noise=np.zeros((1, 4, 1), np.float32))
    with pytest.raises(ValueError, match="noise.*shape"):
        chunk_policy(np.zeros((2, 3), np.float32), noise=np.zeros((2, 3, 1), np.float32))
    with pytest.raises(ValueError, match="batch 1, other inputs have 2"):
        chunk_policy(np.zeros((2, 3), np.float32), noise=np.zeros((1, 4, 1), np.float32))
    zeros = chunk_policy(np.zeros((2, 3), np.float32), noise=np.zeros((2, 4, 1), np.float32))
    assert zeros.shape == (2, 4, 1)
    assert chunk_policy.chunk_length == 4 and chunk_policy.kind == "chunk"


def test_recurrent_state_batch_and_reset(gru_policy):
    obs = np.ones((3, 3), np.float32)
    first = gru_policy(obs)
    second = gru_policy(obs)
    assert not np.allclose(first, second)  # the state moved
    with pytest.raises(ValueError, match="call reset"):
        gru_policy(np.ones((2, 3), np.float32))
    gru_policy.reset(np.array([True, False, False]))
    third = gru_policy(obs)
    np.testing.assert_allclose(third[0], first[0], atol=1e-6)  # env 0 restarted from zero state
    gru_policy.reset()
    assert gru_policy.state is None
    assert gru_policy(np.ones((2, 3), np.float32)).shape == (2, 1)


def test_reset_with_wrong_number_of_dones_names_both_sizes(gru_policy):
    gru_policy(np.ones((3, 3), np.float32))
    before = {k: v.copy() for k, v in gru_policy.state.items()}
    for dones in (np.array([True, False]), np.zeros(4, bool), np.zeros((2, 3), bool)):
        with pytest.raises(ValueError, match=r"holds 3 sequences; pass one flag per sequence \(shape \[3\]\)"):
            gru_policy.reset(dones)
    assert all(np.array_equal(before[k], v) for k, v in gru_policy.state.items())  # untouched
    gru_policy.reset(np.array([[False], [True], [False]]))  # [B, 1] flags are fine
    h = gru_policy.state["h"]  # [L, B, H]
    assert not h[:, 1].any() and np.array_equal(h[:, [0, 2]], before["h"][:, [0, 2]])


@pytest.mark.parametrize("content", ["garbage", "truncated"])
def test_corrupt_file_raises_value_error_naming_it(tmp_path, step_policy, content):
    path = tmp_path / "broken.onnx"
    good = (tmp_path / "p.onnx").read_bytes()
    path.write_bytes(b"this is not an onnx model" if content == "garbage" else good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"broken\.onnx' is not a loadable ONNX model.*re-export"):
        OnnxPolicy(path)


def test_non_rslkit_model_and_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="rslkit.export"):
        OnnxPolicy(tmp_path / "missing.onnx")
    node = onnx.helper.make_node("Identity", ["x"], ["y"])
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="no 'rslkit' metadata"):
        OnnxPolicy(tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="intra_op_threads"):
        OnnxPolicy(tmp_path / "x.onnx", intra_op_threads=0)


def test_non_finite_outputs_raise(tmp_path):
    from rslkit.deploy.metadata import PolicyMetadata, write_metadata

    node = onnx.helper.make_node("Log", ["policy"], ["actions"])
    graph = onnx.helper.make_graph(
        [node],
        "log",
        [onnx.helper.make_tensor_value_info("policy", onnx.TensorProto.FLOAT, ["batch", 1])],
        [onnx.helper.make_tensor_value_info("actions", onnx.TensorProto.FLOAT, ["batch", 1])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    meta = PolicyMetadata("step", "test", {"policy": [1]}, 1, ["policy"], ["actions"])
    write_metadata(model, meta)
    onnx.save(model, tmp_path / "log.onnx")
    policy = OnnxPolicy(tmp_path / "log.onnx")
    assert policy(np.ones((2, 1), np.float32)).shape == (2, 1)
    with pytest.raises(RuntimeError, match="non-finite 'actions'"):
        policy(np.full((2, 1), -1.0, np.float32))
    assert OnnxPolicy(tmp_path / "log.onnx", check_outputs=False)(np.full((1, 1), -1.0, np.float32)).shape == (1, 1)
