"""Every exported policy kind passes the ONNX checker and matches torch within 1e-5 on random inputs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from tensordict import TensorDict

from rslkit.cli.common import run_cli
from rslkit.cli.export import main
from rslkit.deploy.export import MAX_OPSET, export_checkpoint, export_policy
from rslkit.deploy.metadata import read_metadata
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.models.actor_critic import ActorCritic, PolicyCfg
from rslkit.models.flow import FlowPolicy, FlowPolicyCfg

ATOL = 1e-5


def _obs(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, 3)).astype(np.float32) * 2


def _td(x: np.ndarray) -> TensorDict:
    return TensorDict({"policy": torch.from_numpy(x)}, batch_size=[x.shape[0]])


def _checked(path) -> onnx.ModelProto:
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"distribution": "tanh_gaussian"},
        {"distribution": "beta"},
        {"state_dependent_std": True},
        {"obs_normalization": False},
    ],
    ids=["gaussian", "tanh", "beta", "state_std", "no_norm"],
)
def test_ppo_mlp_matches_torch(tmp_path, build, policy):
    runner = build.ppo(tmp_path / "model_0.pt", **policy)
    meta = export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx")
    model = _checked(tmp_path / "p.onnx")
    props = {p.key: p.value for p in model.metadata_props}
    assert read_metadata(props) == meta
    assert meta.kind == "step" and meta.obs_groups == {"policy": [3]} and meta.action_dim == 1
    assert meta.task == "pendulum" and meta.control_rate_hz == pytest.approx(20.0)
    onnx_policy = OnnxPolicy(tmp_path / "p.onnx")
    obs = _obs(64)
    with torch.no_grad():
        expected = runner.policy.act_inference(_td(obs)).numpy()
    np.testing.assert_allclose(onnx_policy(obs), expected, rtol=0, atol=ATOL)
    assert np.abs(expected).max() > 1e-2  # the comparison is not between two near-zero outputs


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_recurrent_ppo_carries_state_like_torch(tmp_path, build, rnn):
    runner = build.ppo(tmp_path / "model_0.pt", rnn_type=rnn, rnn_hidden_dim=8, rnn_num_layers=2)
    meta = export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx")
    _checked(tmp_path / "p.onnx")
    assert meta.kind == "recurrent" and meta.rnn_type == rnn
    assert list(meta.state_shapes) == (["h", "c"] if rnn == "lstm" else ["h"])
    onnx_policy = OnnxPolicy(tmp_path / "p.onnx")
    policy = runner.policy
    policy.reset()
    actions = []
    with torch.no_grad():
        for step in range(6):
            obs = _obs(5, seed=step)
            expected = policy.act_inference(_td(obs)).numpy()
            got = onnx_policy(obs)
            np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL, err_msg=f"step {step}")
            actions.append(got)
            if step == 2:  # episode ends for envs 1 and 3
                dones = torch.tensor([False, True, False, True, False])
                policy.reset(dones)
                onnx_policy.reset(dones.numpy())
    assert not np.allclose(actions[0], actions[1])
    h = onnx_policy.state["h"]
    assert h.shape == (2, 5, 8)


def test_sac_actor_matches_torch(tmp_path, build):
    runner = build.sac(tmp_path / "model_0.pt")
    meta = export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx")
    _checked(tmp_path / "p.onnx")
    assert meta.algorithm == "sac" and meta.kind == "step"
    obs = _obs(32)
    with torch.no_grad():
        expected = runner.policy.act_inference(_td(obs)).numpy()
    np.testing.assert_allclose(OnnxPolicy(tmp_path / "p.onnx")(obs), expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("steps", [1, 4])
def test_flow_checkpoint_chunks_match_torch(tmp_path, build, steps):
    runner = build.flow(tmp_path / "model_0.pt")
    meta = export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx", num_flow_steps=steps)
    _checked(tmp_path / "p.onnx")
    assert (meta.kind, meta.chunk_length, meta.num_flow_steps, meta.noise_shape) == ("chunk", 4, steps, [4, 1])
    obs = _obs(16)
    noise = np.random.default_rng(1).normal(size=(16, 4, 1)).astype(np.float32)
    with torch.no_grad():
        expected = runner.policy.act_chunk(torch.from_numpy(obs), torch.from_numpy(noise), steps).numpy()
    got = OnnxPolicy(tmp_path / "p.onnx")(obs, noise)
    assert got.shape == (16, 4, 1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("objective", ["rectified_flow", "shortcut"])
def test_flow_policy_from_config_with_seeded_noise(tmp_path, build, objective):
    cfg = FlowPolicyCfg(horizon=8, num_inference_steps=3, hidden_dim=32, num_blocks=2, objective=objective)
    policy = FlowPolicy(5, 2, cfg)
    policy.set_normalization(
        {"observation.state": {"min": [-2.0] * 5, "max": [1.0, 2, 3, 4, 5]}, "action": {"min": [-1, -3], "max": [1, 0]}}
    )
    build.randomize(policy)
    export_policy(policy, tmp_path / "f.onnx", "flow-bc")
    _checked(tmp_path / "f.onnx")
    obs = np.random.default_rng(2).normal(size=(3, 5)).astype(np.float32)
    a, b = OnnxPolicy(tmp_path / "f.onnx", seed=7), OnnxPolicy(tmp_path / "f.onnx", seed=7)
    chunk = a(obs)
    np.testing.assert_array_equal(chunk, b(obs))  # same seed, same noise, same chunk
    noise = np.random.default_rng(7).standard_normal((3, 8, 2)).astype(np.float32)
    with torch.no_grad():
        expected = policy.act_chunk(torch.from_numpy(obs), torch.from_numpy(noise)).numpy()
    np.testing.assert_allclose(chunk, expected, rtol=0, atol=ATOL)


def test_reinflow_checkpoint_unrolls_the_chain_steps(tmp_path, build):
    runner = build.reinflow(tmp_path / "model_0.pt")
    meta = export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx")
    assert meta.algorithm == "reinflow" and meta.num_flow_steps == runner.alg.chain.num_steps == 2
    obs, noise = _obs(4), np.random.default_rng(3).normal(size=(4, 4, 1)).astype(np.float32)
    with torch.no_grad():
        expected = runner.policy.act_chunk(torch.from_numpy(obs), torch.from_numpy(noise), 2).numpy()
    np.testing.assert_allclose(OnnxPolicy(tmp_path / "p.onnx")(obs, noise), expected, rtol=0, atol=ATOL)


def test_categorical_and_multi_group_policy(tmp_path):
    obs = TensorDict({"policy": torch.zeros(2, 3), "extra": torch.zeros(2, 2)}, batch_size=[2])
    cfg = PolicyCfg(
        actor_hidden_dims=(8,),
        critic_hidden_dims=(8,),
        distribution="categorical",
        actor_obs_groups=("policy", "extra"),
    )
    policy = ActorCritic(obs, 1, cfg, num_choices=3)
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn_like(p))
    meta = export_policy(policy, tmp_path / "c.onnx", "ppo", obs_dims={"policy": 3, "extra": 2})
    assert meta.input_names == ["policy", "extra"] and meta.action_dim == 1
    x = {"policy": _obs(16), "extra": _obs(16, seed=1)[:, :2]}
    td = TensorDict({k: torch.from_numpy(v) for k, v in x.items()}, batch_size=[16])
    with torch.no_grad():
        expected = policy.act_inference(td).numpy()
    got = OnnxPolicy(tmp_path / "c.onnx")(x)
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(got)) > 1


def test_cli_writes_model(tmp_path, build, capsys):
    build.ppo(tmp_path / "model_0.pt")
    meta = main(["--checkpoint", str(tmp_path / "model_0.pt"), "--out", str(tmp_path / "out" / "policy.onnx")])
    assert (tmp_path / "out" / "policy.onnx").is_file() and meta.algorithm == "ppo"
    assert "Exported ppo step policy" in capsys.readouterr().out
    # The task's names travel with the policy (read back from the file, not the returned object).
    saved = read_metadata({p.key: p.value for p in onnx.load(str(tmp_path / "out" / "policy.onnx")).metadata_props})
    assert saved.action_names == ["torque_normalized"] and saved.joint_names is None
    assert saved.obs_names == {"policy": ["cos_theta", "sin_theta", "theta_dot"]}


def test_env_names_are_checked_against_sizes():
    from rslkit.deploy.export import env_names
    from rslkit.envs import make_env

    for task in ("so101-lift", "go2-flat"):  # every robot task names its joints, sized like its spaces
        assert len(env_names(make_env(task, num_envs=1))["joint_names"]) == make_env(task, num_envs=1).num_actions
    env = make_env("so101-reach", num_envs=1)
    names = env_names(env)
    assert names["joint_names"] == ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]
    assert len(names["obs_names"]["policy"]) == env.get_observations()["policy"].shape[-1]
    env.joint_names = ["shoulder_pan"]
    with pytest.raises(ValueError, match="joint_names has 1 entries for 5 actions"):
        env_names(env)
    env.joint_names = None
    env.observation_names = {"policy": ["a", "b"]}
    with pytest.raises(ValueError, match=r"observation_names\['policy'\] has 2 names \(24 columns\)"):
        env_names(env)


def test_newer_metadata_format_is_refused():
    from rslkit.deploy.metadata import FORMAT_VERSION, PolicyMetadata

    text = json.dumps({"format_version": FORMAT_VERSION + 1})
    with pytest.raises(ValueError, match="Upgrade rslkit"):
        PolicyMetadata.from_json(text)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export_checkpoint(tmp_path / "nope.pt", tmp_path / "p.onnx")


def test_unsupported_module_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="Cannot export a Linear"):
        export_policy(torch.nn.Linear(3, 1), tmp_path / "p.onnx", "ppo")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint", "missing.pt", "--out", "p.onnx"], "does not exist"),
        (["--checkpoint", "missing.pt", "--out", "p.onnx", "--flow_steps", "0"], "--flow_steps must be >= 1"),
        (["--checkpoint", "missing.pt", "--out", "p.txt"], "must name an .onnx file"),
        (["--checkpoint", "missing.pt", "--out", "p.onnx", "--opset", "13"], "--opset must be between 17 and 20"),
        (["--checkpoint", "missing.pt", "--out", "p.onnx", "--opset", "99"], "--opset must be between 17 and 20"),
        (["--checkpoint", "not_a_checkpoint.pt", "--out", "p.onnx"], "Could not read checkpoint"),
    ],
)
def test_cli_bad_input_is_a_message_not_a_traceback(tmp_path, monkeypatch, capsys, args, message):
    # In-process through the entry point's own wrapper (run_cli), as `python -m rslkit.export` runs it; the
    # subprocess case below checks the command itself once.
    (tmp_path / "not_a_checkpoint.pt").write_bytes(b"garbage")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(args))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert message in err and "Traceback" not in err


def test_the_export_command_ends_bad_input_with_exit_code_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rslkit.export", "--checkpoint", "missing.pt", "--out", "p.onnx", "--opset", "99"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "--opset must be between 17 and 20" in out.stderr and "Traceback" not in out.stderr


def test_flow_steps_on_a_policy_without_flow_chain_is_refused(tmp_path, monkeypatch, capsys, build):
    """``--flow_steps 4`` on a PPO checkpoint was silently ignored; now it is a message naming the flag."""
    build.ppo(tmp_path / "model_0.pt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(["--checkpoint", "model_0.pt", "--out", "p.onnx", "--flow_steps", "4"]))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "--flow_steps" in err and "no flow chain" in err and "Traceback" not in err
    assert not (tmp_path / "p.onnx").exists()
    build.sac(tmp_path / "sac.pt")
    with pytest.raises(ValueError, match="--flow_steps .* sac policy"):
        export_checkpoint(tmp_path / "sac.pt", tmp_path / "p.onnx", num_flow_steps=2)


def test_highest_supported_opset_exports_and_matches_torch(tmp_path, build):
    runner = build.ppo(tmp_path / "model_0.pt")
    main(["--checkpoint", str(tmp_path / "model_0.pt"), "--out", str(tmp_path / "p.onnx"), "--opset", str(MAX_OPSET)])
    model = _checked(tmp_path / "p.onnx")
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [MAX_OPSET]
    obs = _obs(8)
    with torch.no_grad():
        expected = runner.policy.act_inference(_td(obs)).numpy()
    np.testing.assert_allclose(OnnxPolicy(tmp_path / "p.onnx")(obs), expected, rtol=0, atol=ATOL)


def test_flow_steps_zero_is_refused_not_replaced(tmp_path, build):
    build.flow(tmp_path / "model_0.pt")
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx", num_flow_steps=0)
