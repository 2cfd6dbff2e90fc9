"""Distillation runner: exact resume, seeded determinism, self-contained checkpoints,
the teacher from ``--agent.teacher_checkpoint`` or a loaded PPO checkpoint, and clear errors for bad input."""

from __future__ import annotations

import pytest
import torch

from rslkit.envs import make_env
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.student_teacher import StudentCfg
from rslkit.recipes import load_run
from rslkit.runners.distillation_config import DistillationRunnerCfg
from rslkit.runners.distillation_runner import DistillationRunner
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.checkpoint import load_checkpoint
from tests.runners.distill_teacher import student_runner, teacher_checkpoint


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory):
    return teacher_checkpoint(tmp_path_factory.mktemp("teacher") / "model_0.pt")


def _params(runner: DistillationRunner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in runner.policy.state_dict().items()}


@pytest.mark.parametrize("student", ["mlp", "history", "gru"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, teacher, student):
    straight = student_runner(teacher, tmp_path / "a", student=student, num_envs=8)
    straight.learn(4)
    interrupted = student_runner(teacher, tmp_path / "b", student=student, num_envs=8)
    interrupted.learn(2)
    resumed = student_runner(
        None, tmp_path / "c", seed=7, student=student, num_envs=8
    )  # no teacher file: the checkpoint has it
    resumed.load(tmp_path / "b" / "model_2.pt")
    assert resumed.iteration == 2
    resumed.learn(2)
    for key, value in _params(straight).items():
        torch.testing.assert_close(_params(resumed)[key], value, rtol=0, atol=0, msg=key)


def test_same_seed_same_run_and_seeds_differ(teacher):
    params = []
    for seed in (0, 0, 1):
        runner = student_runner(teacher, seed=seed, student="history", num_envs=8)
        runner.learn(2)
        params.append(_params(runner))
    for key, value in params[0].items():
        torch.testing.assert_close(params[1][key], value, rtol=0, atol=0, msg=key)
    assert any(not torch.equal(params[2][k], v) for k, v in params[0].items())


def test_checkpoints_are_self_contained_and_rebuild_without_the_teacher_file(tmp_path, teacher):
    runner = student_runner(teacher, tmp_path / "run")
    runner.learn(2)
    saved = load_checkpoint(tmp_path / "run" / "model_2.pt")
    assert saved["agent_cfg"]["teacher_checkpoint"] == "" and saved["teacher_from"] == str(teacher)
    assert tuple(saved["agent_cfg"]["teacher"]["actor_obs_groups"]) == ("critic",)
    teacher.rename(teacher.with_suffix(".moved"))
    try:
        _, rebuilt, _ = load_run(tmp_path / "run" / "model_2.pt", num_envs=2)
    finally:
        teacher.with_suffix(".moved").rename(teacher)
    for key, value in _params(runner).items():
        torch.testing.assert_close(_params(rebuilt)[key], value, rtol=0, atol=0, msg=key)


def test_a_loaded_ppo_checkpoint_becomes_the_teacher(teacher):
    """rsl_rl's ``runner.load(teacher)`` (``train.py --algo distillation --checkpoint TEACHER``)."""
    runner = student_runner(None)
    with pytest.raises(ValueError, match="needs a trained teacher: pass --agent.teacher_checkpoint"):
        runner.learn(1)
    runner.load(teacher)
    weight = runner.policy.teacher.actor[0].weight
    assert torch.equal(weight, teacher_checkpoint_weight(teacher)) and not weight.requires_grad
    assert runner.learn(1)["Loss/behavior"] > 0


def teacher_checkpoint_weight(path) -> torch.Tensor:
    return load_checkpoint(path)["alg"]["policy"]["actor.0.weight"]


def test_a_missing_teacher_checkpoint_names_the_flag(tmp_path):
    with pytest.raises(FileNotFoundError, match="--agent.teacher_checkpoint '.*nope.pt' does not exist"):
        student_runner(tmp_path / "nope.pt")


def test_a_teacher_group_the_env_lacks_is_named(teacher):
    env = make_env("pendulum", num_envs=2)  # only a 'policy' group; the teacher reads 'critic'
    cfg = DistillationRunnerCfg(teacher_checkpoint=str(teacher), logger=())
    with pytest.raises(ValueError, match="teacher \\(--agent.teacher_checkpoint\\) reads observation group 'critic'"):
        DistillationRunner(env, cfg)


def test_a_student_group_the_env_lacks_is_named(teacher):
    env = make_env("point-reach", num_envs=2)
    cfg = DistillationRunnerCfg(teacher_checkpoint=str(teacher), student=StudentCfg(obs_groups=("proprio",)), logger=())
    with pytest.raises(ValueError, match="student reads observation group 'proprio'.*--agent.student.obs_groups"):
        DistillationRunner(env, cfg)


def test_a_teacher_of_other_sizes_is_refused_with_the_flag(tmp_path):
    pendulum = OnPolicyRunner(make_env("pendulum", num_envs=2), PPORunnerCfg(logger=()), None)
    pendulum.save(tmp_path / "pendulum.pt")  # reads a 3-column 'policy' group and drives 1 action
    cfg = DistillationRunnerCfg(teacher_checkpoint=str(tmp_path / "pendulum.pt"), logger=())
    with pytest.raises(ValueError, match="teacher \\(--agent.teacher_checkpoint\\) does not fit this env"):
        DistillationRunner(make_env("point-reach", num_envs=2), cfg)


def test_a_non_ppo_teacher_checkpoint_is_refused(tmp_path, teacher):
    runner = student_runner(teacher, tmp_path / "run")
    runner.learn(1)
    with pytest.raises(ValueError, match="was written by 'distillation'; the teacher is a ppo checkpoint"):
        student_runner(tmp_path / "run" / "model_1.pt")


def test_a_recurrent_student_takes_no_window():
    from rslkit.utils.validation import ConfigError, validate

    with pytest.raises(ConfigError, match="--agent.student.history_length: must be 1 with a recurrent student"):
        validate(StudentCfg(rnn_type="gru", history_length=3), "agent.student")
    assert PolicyCfg().actor_obs_groups == ("policy",)  # the teacher config's default, replaced from its checkpoint


def test_a_recurrent_teacher_labels_with_its_memory_and_resumes_exactly(tmp_path):
    env = make_env("point-reach", num_envs=2)
    policy = PolicyCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,), rnn_type="gru", rnn_hidden_dim=8)
    OnPolicyRunner(env, PPORunnerCfg(policy=policy, logger=()), None).save(tmp_path / "gru_teacher.pt")
    straight = student_runner(tmp_path / "gru_teacher.pt", tmp_path / "a", num_envs=4)
    straight.learn(4)
    assert straight.policy.teacher.actor_hidden is not None
    part = student_runner(tmp_path / "gru_teacher.pt", tmp_path / "b", num_envs=4)
    part.learn(2)
    resumed = student_runner(None, tmp_path / "c", seed=3, num_envs=4)
    resumed.load(tmp_path / "b" / "model_2.pt")
    resumed.learn(2)
    for key, value in _params(straight).items():
        torch.testing.assert_close(_params(resumed)[key], value, rtol=0, atol=0, msg=key)
