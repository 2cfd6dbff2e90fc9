"""Camera observation groups of so101-reach / so101-lift: shapes, what the images show, resets, errors, CLI, runs."""

from __future__ import annotations

import pytest
import torch

from rslkit.envs.camera_groups import camera_names
from rslkit.envs.mujoco import models
from rslkit.envs.mujoco.cameras import CameraRenderer, check_camera_cfg, task_cameras
from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir
from rslkit.envs.tasks.so101_lift import SO101LiftCfg, SO101LiftTask
from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask
from rslkit.utils.config import apply_overrides
from tests.envs.gl import require_gl

try:
    so101_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)

BOTH = ("front", "wrist")


def _reach(**kw) -> SO101ReachTask:
    require_gl()
    return SO101ReachTask(SO101ReachCfg(**{"num_envs": 2, "sim_threads": 1, "cameras": BOTH, **kw}))


def _lift(**kw) -> SO101LiftTask:
    require_gl()
    return SO101LiftTask(SO101LiftCfg(**{"num_envs": 2, "sim_threads": 1, "cameras": BOTH, **kw}))


def _green(img: torch.Tensor) -> int:
    """Pixels of the reach target's marker (green, opaque) in ``[H, W, 3]``."""
    r, g, b = img.int().unbind(-1)
    return int(((g > 120) & (g > r + 60) & (g > b + 60)).sum())


def _purple(img: torch.Tensor) -> torch.Tensor:
    """``[H, W]`` mask of the lift cube's pixels (rgba 0.6 0.3 0.6)."""
    r, g, b = img.int().unbind(-1)
    return (r > g + 40) & (b > g + 40)


def test_cameras_are_off_by_default_and_need_no_gl():
    env = SO101ReachTask(SO101ReachCfg(num_envs=2, sim_threads=1))
    assert list(env.get_observations().keys()) == ["policy"]
    env.close()


@pytest.mark.parametrize("quality", ["fast", "visual"])
@pytest.mark.parametrize("make", [_reach, _lift])
def test_groups_hold_uint8_images_of_every_env(make, quality):
    env = make(camera_width=40, camera_height=24, camera_quality=quality)
    obs = env.get_observations()
    assert camera_names(obs.keys()) == list(BOTH)
    for name in BOTH:
        img = obs[f"camera_{name}"]
        assert img.dtype == torch.uint8 and tuple(img.shape) == (2, 24, 40, 3) and img.float().std() > 5
    step_obs, *_ = env.step(torch.zeros(2, env.num_actions))
    assert tuple(step_obs["camera_front"].shape) == (2, 24, 40, 3) and step_obs["policy"].shape[-1] > 0
    env.close()


def test_images_follow_the_arm_and_are_deterministic():
    env = _reach()
    obs = env.start_episode_from(1, env.env_state(0))  # env 1 = env 0: same arm, same target
    for name in BOTH:
        assert torch.equal(obs[f"camera_{name}"][0], obs[f"camera_{name}"][1])
    actions = torch.zeros(2, env.num_actions)
    actions[1] = torch.tensor([0.8, 0.5, -0.5, 0.5, 0.5])
    moved, *_ = env.step(actions)
    for name in BOTH:
        assert not torch.equal(moved[f"camera_{name}"][0], moved[f"camera_{name}"][1]), name
    env.close()


def test_reach_target_is_drawn_where_it_is():
    env = _reach()
    state = env.env_state(0)
    state["target"] = torch.tensor([0.35, -0.2, 0.3])  # between the front camera and the arm
    visible = env.start_episode_from(0, state)["camera_front"][0]
    state["target"] = torch.tensor([0.0, 0.0, -1.0])  # under the floor
    hidden = env.start_episode_from(0, state)["camera_front"][0]
    assert _green(visible) >= 3 and _green(hidden) == 0
    env.close()


def test_lift_cube_is_visible_and_moves_in_the_image():
    env = _lift(cameras=("front",))
    before = _purple(env.get_observations()["camera_front"][0])
    env.backend.qpos[0, env._cube_qpos + 1] += 0.1  # cube 10 cm to the arm's left
    after = _purple(env.start_episode_from(0, env.env_state(0))["camera_front"][0])
    assert before.sum() >= 4 and after.sum() >= 4
    columns = torch.arange(before.shape[1]).float()
    centre = [float((mask.float() * columns).sum() / mask.sum()) for mask in (before, after)]
    assert abs(centre[1] - centre[0]) >= 2, centre
    env.close()


def test_auto_reset_images_show_the_new_episode():
    """After a time-out the returned images are of the reset state, ``final_obs`` holds the last frame, and only
    the changed rows are redrawn (the incremental images equal a fresh renderer's)."""
    env = _lift(episode_length=3)
    env.request_final_obs()
    zeros = torch.zeros(2, env.num_actions)
    env.step(zeros)
    obs, _, dones, extras = env.step(zeros)
    last = {k: v.clone() for k, v in obs.items()}
    obs, _, dones, extras = env.step(zeros)
    assert bool(dones.all())
    spec = models.so101_lift_spec(visual=False)
    models.add_so101_cameras(spec)
    fresh = task_cameras(spec, env.backend, env.cfg)
    for name, img in fresh.render().items():
        assert torch.equal(obs[name], img), name
        assert not torch.equal(extras["final_obs"][name], obs[name]) and not torch.equal(last[name], obs[name])
    fresh.close()
    env.close()


def test_renderer_redraws_only_changed_rows(monkeypatch):
    env = _reach(cameras=("front",))
    first = env.get_observations()["camera_front"].clone()
    renderer = env._cameras
    drawn: list[int] = []
    draw = renderer._draw
    monkeypatch.setattr(renderer, "_draw", lambda env_id, *args: (drawn.append(env_id), draw(env_id, *args)))
    state = env.env_state(1)
    state["target"] = torch.tensor([0.35, -0.2, 0.3])
    second = env.start_episode_from(1, state)["camera_front"]
    assert drawn == [1] and torch.equal(first[0], second[0]) and not torch.equal(first[1], second[1])
    env.close()


def test_bad_camera_settings_are_clear_errors():
    with pytest.raises(ValueError, match="unknown camera 'top'; valid cameras: front, wrist"):
        SO101ReachTask(SO101ReachCfg(num_envs=2, cameras=("top",)))
    with pytest.raises(ValueError, match="--env.camera_width: must be a positive number of pixels"):
        SO101LiftTask(SO101LiftCfg(num_envs=2, cameras=("front",), camera_width=0))
    with pytest.raises(ValueError, match="camera_quality: must be one of"):
        SO101ReachTask(SO101ReachCfg(num_envs=2, cameras=("front",), camera_quality="ultra"))
    with pytest.raises(ValueError, match="names a camera twice"):
        SO101ReachTask(SO101ReachCfg(num_envs=2, cameras=("front", "front")))
    with pytest.raises(ValueError, match="valid cameras: none"):
        check_camera_cfg(SO101ReachCfg(cameras=("front",)), ())


def test_renderer_names_the_models_cameras():
    require_gl()
    env = SO101ReachTask(SO101ReachCfg(num_envs=1, sim_threads=1))
    with pytest.raises(ValueError, match=r"has no camera 'top'; its cameras: \['front', 'table', 'wrist'\]"):
        spec = models.so101_scene_spec(visual=False)
        models.add_so101_cameras(spec)
        CameraRenderer(spec.compile(), env.backend, ["top"])
    with pytest.raises(ValueError, match="state values per env"):
        CameraRenderer(models.load_so101_lift(), env.backend, ["front"])
    env.close()


def test_cli_parses_camera_lists():
    cfg = SO101ReachCfg()
    apply_overrides({"env": cfg}, ["--env.cameras", "front"])
    assert cfg.cameras == ("front",)
    apply_overrides({"env": cfg}, ["--env.cameras", "front,wrist", "--env.camera_width=96"])
    assert cfg.cameras == ("front", "wrist") and cfg.camera_width == 96
    apply_overrides({"env": cfg}, ["--env.cameras="])
    assert cfg.cameras == ()
    from rslkit.envs.tasks.pendulum import PendulumCfg

    with pytest.raises(ValueError, match="Unknown config field 'env.cameras'"):
        apply_overrides({"env": PendulumCfg()}, ["--env.cameras", "front"])


@pytest.mark.parametrize(
    ("task", "algo", "extra"),
    [
        ("so101-reach", "ppo", ["--agent.algorithm.num_mini_batches", "1"]),
        ("so101-lift", "sac", ["--agent.learning_starts", "2", "--agent.random_steps", "2"]),
    ],
)
def test_training_ignores_camera_groups(tmp_path, task, algo, extra):
    """PPO and SAC read only their configured groups: with cameras on, a run builds, trains and saves."""
    require_gl()
    from rslkit.cli import train

    common = ["--task", task, "--algo", algo, "--num_envs", "2", "--max_iterations", "2", "--logdir", str(tmp_path)]
    env_args = ["--env.cameras", "front,wrist", "--env.sim_threads", "1", "--env.episode_length", "3"]
    agent_args = ["--agent.logger=", "--agent.num_steps_per_env", "4"]
    runner = train.main([*common, *env_args, *agent_args, *extra])
    assert runner.iteration == 2
    obs = runner.env.get_observations()
    assert obs["camera_wrist"].dtype == torch.uint8
    assert list(runner.policy.normalizers.keys()) == ["policy"]  # no normalizer (or network input) for images


def test_wrist_camera_sees_the_cube_between_the_jaws_while_grasping():
    """The lift expert's approach, grasp and lift: the cube fills >= 1 % of every wrist frame from step 20 on
    (the mount before 2026-12-06, behind the fixed jaw, showed it in none of them)."""
    from rslkit.envs.expert import expert_policy
    from rslkit.envs.registry import expert_for

    env = _lift(cameras=("wrist",), camera_width=32, camera_height=32)
    expert = expert_policy(expert_for("so101-lift", env.cfg), env.device)
    obs = env.get_observations()
    shares = []
    for _ in range(60):
        shares.append(float(_purple(obs["camera_wrist"][0]).float().mean()))
        obs = env.step(expert(obs))[0]
    env.close()
    assert min(shares[20:]) >= 0.01, shares


def test_table_camera_shows_the_cube_larger_than_front_and_every_goal():
    """The ``table`` camera frames the pick workspace: the resting cube covers at least twice the pixels it does in
    ``front``, and a cube moved to each pick-and-place goal stays in its frame."""
    from rslkit.envs.tasks.so101_pick_place import GOAL_POSITIONS

    env = _lift(cameras=("front", "table"))
    obs = env.get_observations()
    front, table = (int(_purple(obs[f"camera_{c}"][0]).sum()) for c in ("front", "table"))
    assert front >= 4 and table >= 2 * front, (front, table)
    c = env._cube_qpos
    for goal, (x, y) in GOAL_POSITIONS.items():
        state = env.env_state(0)
        env.backend.qpos[0, c : c + 2] = torch.tensor([x, y], dtype=env.backend.qpos.dtype)
        seen = int(_purple(env.start_episode_from(0, env.env_state(0))["camera_table"][0]).sum())
        assert seen >= 10, (goal, seen)
        env.start_episode_from(0, state)
    env.close()
