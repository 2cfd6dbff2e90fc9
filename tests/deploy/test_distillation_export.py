"""A distilled student exports like any policy: ONNX Runtime gives the torch student's actions step by step (a window
of frames or a recurrent memory carried as state and reset where episodes end), without the teacher."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rslkit.cli.common import run_cli
from rslkit.cli.export import main
from rslkit.deploy.export import export_checkpoint
from rslkit.deploy.onnx_policy import OnnxPolicy
from tests.runners.distill_teacher import student_runner, teacher_checkpoint

ATOL = 1e-5


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory):
    return teacher_checkpoint(tmp_path_factory.mktemp("teacher") / "model_0.pt")


def _obs(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, 6)).astype(np.float32)


@pytest.mark.parametrize(
    ("student", "kind", "state"),
    [("mlp", "step", {}), ("history", "recurrent", {"h": (2, 5, 6)}), ("gru", "recurrent", {"h": (1, 5, 16)}),
     ("lstm", "recurrent", {"h": (2, 5, 8), "c": (2, 5, 8)})],
)  # fmt: skip
def test_exported_student_matches_torch_step_by_step(tmp_path, teacher, student, kind, state):
    runner = student_runner(teacher, tmp_path / "run", student=student, num_envs=4)
    runner.learn(2)  # trained weights and normalizer statistics
    meta = export_checkpoint(tmp_path / "run" / "model_2.pt", tmp_path / "student.onnx")
    assert meta.kind == kind and meta.algorithm == "distillation" and meta.input_names[0] == "policy"
    assert meta.obs_groups == {"policy": [6]} and meta.action_dim == 2
    onnx_policy = OnnxPolicy(tmp_path / "student.onnx")
    policy = runner.policy.eval()
    policy.reset()
    actions = []
    with torch.no_grad():
        for step in range(5):
            obs = _obs(5, seed=step)
            expected = policy.act_inference(TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[5])).numpy()
            got = onnx_policy(obs)
            np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL, err_msg=f"step {step}")
            actions.append(got)
            if step == 2:  # episodes end for envs 1 and 3
                dones = torch.tensor([False, True, False, True, False])
                policy.reset(dones)
                onnx_policy.reset(dones.numpy())
    assert np.abs(actions[-1]).max() > 1e-2
    assert {n: s.shape for n, s in (onnx_policy.state or {}).items()} == state


def test_the_export_command_writes_a_student(tmp_path, teacher, capsys):
    runner = student_runner(teacher, tmp_path / "run", student="history", num_envs=2)
    runner.learn(2)
    run_cli(lambda: main(["--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "student.onnx")]))
    assert OnnxPolicy(tmp_path / "student.onnx").kind == "recurrent"


def test_the_ros2_control_loop_runs_the_exported_student_with_its_window(tmp_path, teacher):
    """The node's controller (no ROS) feeds a windowed student tick by tick like a recurrent policy: its commands
    are a reference OnnxPolicy's on the same observations, the window carried between ticks."""
    from rslkit.deploy.ros2.config import ControllerCfg
    from rslkit.deploy.ros2.controller import PolicyController

    runner = student_runner(teacher, tmp_path / "run", student="history", num_envs=2)
    runner.learn(2)
    export_checkpoint(tmp_path / "run" / "model_2.pt", tmp_path / "student.onnx")
    joints = ["x", "y"]  # point-reach's 6 columns as 2 positions, 2 velocities and the 2 last actions
    ctrl = PolicyController(
        OnnxPolicy(tmp_path / "student.onnx"),
        ControllerCfg(joints, 50.0, observation=["joint_pos", "joint_vel", "last_action"]),
    )
    reference = OnnxPolicy(tmp_path / "student.onnx")
    last = np.zeros(2, np.float32)
    commands, expected = [], []
    for tick in range(4):
        pos, vel = [0.1 * tick, -0.2], [0.3, 0.05 * tick]
        out = ctrl.on_joint_state(0.02 * tick, joints, pos, vel)
        assert out is not None and out.status == "run"
        commands.append(out.positions)
        last = reference(np.array([*pos, *vel, *last], np.float32))
        expected.append(last)
    np.testing.assert_allclose(np.array(commands), np.array(expected), rtol=1e-6, atol=1e-6)
    assert reference.state is not None and reference.state["h"].shape == (2, 1, 6)
