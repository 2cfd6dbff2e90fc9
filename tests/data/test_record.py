"""Recording demonstrations: the scripted pendulum expert and ``python -m rslkit.record`` on a PPO checkpoint."""

import json

import pytest
import torch

from rslkit import record
from rslkit.cli import train
from rslkit.data import read_lerobot_dataset, record_episodes
from rslkit.envs import make_env
from rslkit.envs.tasks.pendulum import pendulum_expert


def test_scripted_expert_swings_up():
    env = make_env("pendulum", num_envs=64, seed=0)
    seen: list = []
    episodes = record_episodes(env, pendulum_expert, 64, on_episode=seen.append)
    returns = torch.tensor([float(ep.rewards.sum()) for ep in episodes])
    assert returns.mean() > -200  # PPO reaches about -150..-200 on Pendulum-v1
    assert len(seen) == 64 and all(a is b for a, b in zip(seen, episodes)), "one progress call per kept episode"


def test_record_episodes_noise_and_fresh_starts():
    env = make_env("pendulum", num_envs=3, seed=0, episode_length=6)
    env.episode_length_buf[0] = 4  # env 0 is mid-episode: its first episode must not be recorded
    g = torch.Generator().manual_seed(0)
    episodes = record_episodes(env, lambda obs: torch.zeros(3, 1), 4, action_noise=5.0, generator=g, task="t")
    assert [len(ep) for ep in episodes] == [6, 6, 6, 6]
    actions = torch.cat([ep.actions for ep in episodes])
    assert actions.abs().max() <= 1.0 and actions.std() > 0.5  # noisy, clipped to the Box action space
    assert all(bool(ep.dones[-1]) and not bool(ep.dones[:-1].any()) for ep in episodes)
    with pytest.raises(ValueError, match="no observation group 'state'"):
        record_episodes(env, pendulum_expert, 1, obs_group="state")


def test_action_smoothing_filters_executed_actions_within_episodes():
    env = make_env("pendulum", num_envs=2, seed=0, episode_length=5)
    signs = iter([1.0, -1.0] * 50)
    alpha = 0.75

    def alternating(obs):
        return torch.full((2, 1), next(signs) * 0.8)

    episodes = record_episodes(env, alternating, 3, action_smoothing=alpha)
    a = episodes[0].actions[:, 0].tolist()
    assert a[0] == pytest.approx(0.8)  # no filter at an episode's first step
    for t in range(1, len(a)):
        raw = 0.8 if t % 2 == 0 else -0.8
        assert a[t] == pytest.approx(alpha * a[t - 1] + (1 - alpha) * raw, abs=1e-6)
    assert episodes[2].actions[0, 0].abs().item() == pytest.approx(0.8)  # env 0's next episode: filter restarted
    with pytest.raises(ValueError, match="action_smoothing"):
        record_episodes(env, alternating, 1, action_smoothing=1.0)


def test_policy_labels_are_clean_actions_at_noisy_states():
    """DART: the execution is noisy (the states drift), the stored label is the expert's clean action there."""
    env = make_env("pendulum", num_envs=4, seed=0, episode_length=20)
    g = torch.Generator().manual_seed(0)
    dart = record_episodes(env, pendulum_expert, 4, action_noise=0.5, generator=g, label="policy")
    for ep in dart:
        expected = pendulum_expert(ep.observations).clamp(-1.0, 1.0)
        assert torch.allclose(ep.actions, expected, atol=1e-6), "labels must be the expert's clean actions"
    env = make_env("pendulum", num_envs=4, seed=0, episode_length=20)
    g = torch.Generator().manual_seed(0)
    executed = record_episodes(env, pendulum_expert, 4, action_noise=0.5, generator=g)
    for a, b in zip(dart, executed):
        assert torch.equal(a.observations, b.observations), "same seed, same noise: the same visited states"
        assert (a.actions - b.actions).abs().max() > 0.1, "executed actions carry the noise, labels do not"
    with pytest.raises(ValueError, match="label must be one of"):
        record_episodes(env, pendulum_expert, 1, label="noisy")


def test_record_cli_from_ppo_checkpoint(tmp_path, capsys):
    args = ["--task", "pendulum", "--logdir", str(tmp_path), "--max_iterations", "1", "--num_envs", "16"]
    train.main(args + ["--agent.logger", ""])
    ckpt = next((tmp_path / "pendulum").glob("*/model_1.pt"))
    out = tmp_path / "demos"
    record.main(
        [
            "--task",
            "pendulum",
            "--checkpoint",
            str(ckpt),
            "--episodes",
            "5",
            "--action_noise",
            "0.2",
            "--out",
            str(out),
            "--env.episode_length",
            "20",
        ]
    )
    demos = read_lerobot_dataset(out)
    assert demos.num_episodes == 5 and demos.num_frames == 100 and demos.fps == 20
    assert demos.tasks == ["pendulum"] and demos.info["robot_type"] == "pendulum"
    assert "Wrote 5 episodes (100 frames" in capsys.readouterr().out
    with pytest.raises(ValueError, match="already holds a dataset"):
        record.main(["--task", "pendulum", "--checkpoint", str(ckpt), "--episodes", "1", "--out", str(out)])
    with pytest.raises(ValueError, match=r"no camera 'front'.*Turn the camera on .*--env.cameras front"):
        record.main(
            ["--checkpoint", str(ckpt), "--episodes", "1", "--out", str(out), "--camera", "front", "--overwrite"]
        )


def test_record_episodes_with_a_camera(camera_env):
    env = camera_env(num_envs=2, episode_length=4)
    env.episode_length_buf[1] = 2  # env 1 joins at its next episode
    episodes = record_episodes(env, lambda obs: torch.ones(2, 1), 5, cameras=["front"], task="stack the cubes")
    assert len(episodes) == 5 and all(ep.task == "stack the cubes" for ep in episodes)
    for ep in episodes:
        frames = ep.images["front"]
        assert frames.shape == (4, 16, 24, 3) and frames.dtype == torch.uint8
        # the frame seen with each observation: red = 10 * step, green = 20 * env
        assert frames[:, 3, 5, 0].tolist() == (10 * ep.observations[:, 0]).int().tolist() == [0, 10, 20, 30]
        assert (frames[:, 7, 2, 1] == 20 * ep.observations[:, 1].to(torch.uint8)).all()
    assert sorted({int(ep.observations[0, 1]) for ep in episodes}) == [0, 1]


def test_record_episodes_missing_or_bad_camera(camera_env):
    with pytest.raises(
        ValueError, match=r"no camera 'wrist' \(no observation group 'camera_wrist'.*--env.cameras wrist"
    ):
        record_episodes(camera_env(), lambda obs: torch.zeros(2, 1), 1, cameras=["wrist"])
    with pytest.raises(ValueError, match="--env.cameras front"):
        record_episodes(make_env("pendulum", num_envs=2, seed=0), pendulum_expert, 1, cameras=["front"])

    class FloatCamera(camera_env):
        def get_observations(self):
            obs = super().get_observations()
            obs["camera_front"] = obs["camera_front"].float()
            return obs

    with pytest.raises(
        ValueError, match=r"'camera_front' must hold uint8 RGB frames \[2, H, W, 3\], got torch.float32"
    ):
        record_episodes(FloatCamera(), lambda obs: torch.zeros(2, 1), 1, cameras=["front"])
    with pytest.raises(ValueError, match="Camera names are bare"):
        record_episodes(camera_env(), lambda obs: torch.zeros(2, 1), 1, cameras=["camera_front"])


class _Runner:
    """What ``rslkit.record`` uses of a runner: a deterministic policy and its reset."""

    device = "cpu"

    def inference_policy(self):
        return lambda obs: torch.full((obs.batch_size[0], 1), 0.5)

    def reset_inference(self, dones):
        pass


def test_record_cli_writes_cameras_as_videos_and_the_goal(tmp_path, monkeypatch, camera_env):
    env = camera_env(num_envs=2, episode_length=5)
    monkeypatch.setattr(record, "load_run", lambda *args, **kwargs: (env, _Runner(), {"task": "counting"}))
    out = str(tmp_path / "demos")
    base = ["--checkpoint", "unused.pt", "--episodes", "3", "--out", out, "--fps", "10"]
    root = record.main(base + ["--camera", "front", "--goal", "count to five"])
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"]["observation.images.front"]["dtype"] == "video"
    assert (root / "videos/observation.images.front/chunk-000/file-000.mp4").is_file()
    demos = read_lerobot_dataset(root, cameras=["front"])
    assert demos.tasks == ["count to five"] and demos.images["front"].shape == (15, 16, 24, 3)
    red = demos.images["front"][:, 3, 5, 0].float()
    assert (red - 10 * demos.observations[:, 0]).abs().max() < 6  # frames beside their observations (AV1 tolerance)
    root = record.main(base + ["--description", "the old flag", "--overwrite"])  # --description still works
    demos = read_lerobot_dataset(root)
    assert demos.tasks == ["the old flag"] and demos.available_cameras == []
    with pytest.raises(ValueError, match="no camera 'side'.*--env.cameras side"):
        record.main(base + ["--camera", "side", "--overwrite"])
    with pytest.raises(ValueError, match="no video encoder 'libnope'"):
        record.main(base + ["--camera", "front", "--video_codec", "libnope", "--overwrite"])


def test_each_episode_keeps_the_task_of_its_first_step():
    """Tasks that draw an instruction at reset: the task function is read per step, an episode keeps its first."""
    env = make_env("pendulum", num_envs=2, seed=0, episode_length=3)
    calls = iter(range(1000))

    def task(obs):  # a new "instruction" at every step; the episode must keep the one it started with
        k = next(calls)
        return [f"goal {k} env {i}" for i in range(2)]

    episodes = record_episodes(env, lambda obs: torch.zeros(2, 1), 4, task=task)
    assert [ep.task for ep in episodes] == ["goal 0 env 0", "goal 0 env 1", "goal 3 env 0", "goal 3 env 1"]
    with pytest.raises(ValueError, match="2 strings"):
        record_episodes(env, lambda obs: torch.zeros(2, 1), 1, task=lambda obs: ["only one"])


def test_record_cli_from_the_scripted_expert(tmp_path, capsys):
    out = tmp_path / "expert"
    record.main(["--task", "pendulum", "--expert", "--episodes", "4", "--num_envs", "4", "--out", str(out)])
    demos = read_lerobot_dataset(out)
    assert demos.num_episodes == 4 and demos.tasks == ["pendulum"]
    assert float(demos.episode_returns().mean()) > -300  # the energy-pumping expert swings up
    dart = tmp_path / "dart"
    record.main(["--task", "pendulum", "--expert", "--episodes", "2", "--num_envs", "2", "--out", str(dart),
                 "--action_noise", "0.5", "--label", "policy", "--env_state_group", "policy"])  # fmt: skip
    demos = read_lerobot_dataset(dart)
    torch.testing.assert_close(demos.actions, pendulum_expert(demos.observations).clamp(-1, 1), atol=1e-5, rtol=0)
    assert demos.env_state is not None  # the group recorded as observation.environment_state too
    torch.testing.assert_close(demos.env_state, demos.observations)
    with pytest.raises(SystemExit):
        record.main(["--task", "pendulum", "--expert", "--checkpoint", "x", "--out", str(out)])  # one or the other
    with pytest.raises(ValueError, match="No scripted expert for task 'cartpole'"):
        record.main(["--task", "cartpole", "--expert", "--episodes", "1", "--out", str(tmp_path / "c")])


def test_recorded_datasets_name_their_columns_so_columns_select_by_name(tmp_path):
    """meta/info.json carries the env's observation and action names (they were null): `--state_columns 'x.*'` works
    on every recorded dataset."""
    from rslkit.data.demonstrations import ACTION_KEY, ENV_STATE_KEY, OBS_KEY
    from rslkit.data.lerobot_meta import feature_names, read_info
    from rslkit.envs.columns import select_state_columns

    out = tmp_path / "named"
    record.main(["--task", "pendulum", "--expert", "--episodes", "2", "--num_envs", "2", "--out", str(out),
                 "--env_state_group", "policy"])  # fmt: skip
    info = read_info(out)
    assert feature_names(info, OBS_KEY) == ["cos_theta", "sin_theta", "theta_dot"]
    assert feature_names(info, ENV_STATE_KEY) == ["cos_theta", "sin_theta", "theta_dot"]
    assert feature_names(info, ACTION_KEY) == ["torque_normalized"]
    assert select_state_columns("theta_*,sin_*", 3, feature_names(info, OBS_KEY)) == (1, 2)


def test_success_flags_are_recorded_filtered_written_and_read_back(tmp_path):
    from rslkit.data import episode_stats, write_lerobot_dataset

    env = make_env("point-reach", num_envs=8, seed=0, episode_length=40)

    def toward_goal(obs):  # a PD law on the observed position error and velocity
        return (4.0 * obs["policy"][:, 4:6] - 1.0 * obs["policy"][:, 2:4]).clamp(-1.0, 1.0)

    mixed = record_episodes(env, toward_goal, 8)
    assert all(ep.successes is not None and ep.successes.dtype == torch.bool for ep in mixed)
    solved = record_episodes(env, toward_goal, 4, successful_only=True)
    assert all(ep.succeeded for ep in solved) and episode_stats(solved)["success_rate"] == 1.0
    demos = read_lerobot_dataset(write_lerobot_dataset(tmp_path / "ds", solved, fps=20))
    assert demos.successes is not None and torch.equal(demos.successes, torch.cat([ep.successes for ep in solved]))
    with pytest.raises(RuntimeError, match="Only 0 of 2 successful episodes finished within 50 steps"):
        record_episodes(env, lambda obs: torch.zeros(8, 2), 2, successful_only=True, max_steps=50)
    pendulum = make_env("pendulum", num_envs=2, seed=0)
    with pytest.raises(ValueError, match="successful_only needs an env that reports extras\\['success'\\]"):
        record_episodes(pendulum, pendulum_expert, 1, successful_only=True)
    assert episode_stats(record_episodes(pendulum, pendulum_expert, 2))["success_rate"] != 0.0  # NaN: unknown


def test_names_of_the_wrong_length_are_refused_before_recording(monkeypatch):
    from rslkit.envs.tasks.pendulum import PendulumTask

    monkeypatch.setattr(PendulumTask, "observation_names", {"policy": ["cos_theta", "sin_theta"]})
    with pytest.raises(ValueError, match=r"observation_names\['policy'\] has 2 names for 3 columns"):
        record.main(["--task", "pendulum", "--expert", "--episodes", "1", "--out", "never_written"])
