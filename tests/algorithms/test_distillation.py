"""Distillation: the behaviour-cloning loss falls and the student matches the teacher on a toy task; the update
replays the rollout exactly (windows of frames and recurrent memory included); bad settings are refused."""

from __future__ import annotations

import pytest
import torch

from rslkit.algorithms.distillation import DistillationCfg
from rslkit.models.obs_history import ObservationHistory
from rslkit.utils.validation import ConfigError, validate
from tests.runners.distill_teacher import student_runner, teacher_checkpoint


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory):
    return teacher_checkpoint(tmp_path_factory.mktemp("teacher") / "model_0.pt")


def _mismatch(runner) -> tuple[float, float]:
    """Mean |student - teacher| and mean |teacher| over a fresh rollout of the student (deterministic)."""
    env, policy = runner.env, runner.policy
    act = runner.inference_policy()
    errors, sizes = [], []
    with torch.inference_mode():
        obs = env.get_observations()
        for _ in range(40):
            actions, labels = act(obs), policy.teacher_act(obs)
            errors.append((actions - labels).abs().mean())
            sizes.append(labels.abs().mean())
            obs, _, dones, _ = env.step(actions)
            runner.reset_inference(dones)
    return float(torch.stack(errors).mean()), float(torch.stack(sizes).mean())


@pytest.mark.slow
def test_loss_falls_and_the_blinder_student_matches_the_teacher(teacher):
    runner = student_runner(teacher, num_envs=32, num_learning_epochs=2)
    untrained, _ = _mismatch(student_runner(teacher, num_envs=32))
    losses = []
    for _ in range(30):
        losses.append(runner.learn(1)["Loss/behavior"])
    assert sum(losses[-5:]) / 5 < 0.05 * sum(losses[:2]) / 2, losses
    error, size = _mismatch(runner)
    assert error < 0.1 * untrained, (error, untrained, size)


@pytest.mark.parametrize("student", ["mlp", "history", "gru", "lstm"])
def test_the_update_replays_the_rollout_exactly(teacher, student):
    """The first update's student actions equal the rollout's deterministic ones (memory reset where episodes
    ended), so a window or a recurrent memory sees in the update what it saw when acting."""
    runner = student_runner(teacher, student=student, num_envs=4)
    runner.policy.cfg.noise_std = 0.0
    policy, alg, env = runner.policy, runner.alg, runner.env
    env.episode_length_buf[:2] = env.max_episode_length - 5  # two envs end mid-rollout
    alg.begin_rollout()
    taken = []
    with torch.inference_mode():
        obs = env.get_observations()
        for _ in range(runner.cfg.num_steps_per_env):
            taken.append(alg.act(obs).clone())
            obs, rewards, dones, extras = env.step(taken[-1])
            alg.process_env_step(rewards, dones, extras)
    assert alg.storage.dones[:, :2].any()
    st = alg.storage
    resets = torch.zeros_like(st.dones)
    resets[1:] = st.dones[:-1]
    with torch.no_grad():
        replayed, _ = policy.student_sequence(policy.student_input(st.obs), alg._hidden0, resets)
    torch.testing.assert_close(replayed, torch.stack(taken), rtol=1e-5, atol=1e-6)


def test_observation_history_keeps_the_last_frames_oldest_first():
    history = ObservationHistory(dim=2, length=3)
    state = history.init_hidden(1, torch.device("cpu"))
    for value in (1.0, 2.0, 3.0, 4.0):
        frames, state = history.step(torch.full((1, 2), value), state)
    assert frames[0, :, 0].tolist() == [2.0, 3.0, 4.0]
    assert state.shape == (2, 1, 2)
    with pytest.raises(ValueError, match=">= 2 frames"):
        ObservationHistory(dim=2, length=1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("loss_type", "l1", "must be one of mse, huber"),
        ("gradient_length", 0, "integer >= 1"),
        ("max_grad_norm", -1.0, "0: no clipping"),
        ("learning_rate", float("nan"), "finite number > 0"),
    ],
)
def test_bad_algorithm_settings_name_the_flag(field, value, message):
    cfg = DistillationCfg(**{field: value})
    with pytest.raises(ConfigError, match=f"--agent.algorithm.{field}: .*{message}"):
        validate(cfg, "agent.algorithm")


def test_huber_loss_and_gradient_clipping_train(teacher):
    runner = student_runner(teacher, num_envs=4, loss_type="huber", max_grad_norm=0.5)
    metrics = runner.learn(2)
    assert 0 < metrics["Loss/behavior"] < 10
