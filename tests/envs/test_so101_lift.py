"""so101-lift: model adaptation (cube, contacts), shapes, auto-reset and time-outs, reward terms, success,
terminations and seeded determinism."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir
from rslkit.recipes import recipes_of

try:
    so101_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)

from rslkit.envs.mujoco import models  # noqa: E402
from rslkit.envs.registry import get_task  # noqa: E402
from rslkit.envs.tasks.so101_lift import CUBE_HALF_SIZE, SO101LiftCfg, SO101LiftTask  # noqa: E402

TERMS = {f"Episode_Reward/{t}" for t in ("reach", "grasp", "open", "lift", "success", "action_rate", "joint_vel")}


def _task(**kw) -> SO101LiftTask:
    kw.setdefault("num_envs", 4)
    kw.setdefault("sim_threads", 1)
    return SO101LiftTask(SO101LiftCfg(**kw))


def _name(m: mujoco.MjModel, kind: mujoco.mjtObj, i: int) -> str:
    return mujoco.mj_id2name(m, kind, i) or ""


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return models.load_so101_lift()


def test_model_has_cube_and_keeps_the_contacts_the_task_needs(model):
    assert (model.nq, model.nv, model.nu) == (13, 12, 6)
    cube = model.body(models.SO101_CUBE)
    assert model.jnt_type[model.body_jntadr[cube.id]] == mujoco.mjtJoint.mjJNT_FREE
    colliding = {g for g in range(model.ngeom) if model.geom_contype[g] or model.geom_conaffinity[g]}
    names = {_name(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in colliding}
    assert {"floor", models.SO101_CUBE, *models.SO101_JAW_PADS} <= names
    bodies = {_name(model, mujoco.mjtObj.mjOBJ_BODY, model.geom_bodyid[g]) for g in colliding}
    assert bodies == {"world", models.SO101_CUBE, *models.SO101_JAW_BODIES}  # the rest of the arm is switched off
    assert not any(model.geom_group[g] == 2 for g in range(model.ngeom))  # visual meshes dropped for training


def test_visual_model_keeps_meshes_and_state_layout(model):
    visual = models.load_so101_lift(visual=True)
    assert sum(visual.geom_group == 2) > 10
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    assert mujoco.mj_stateSize(visual, spec) == mujoco.mj_stateSize(model, spec)


def test_cube_rests_on_floor_and_jaws_sense_it(model):
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    for _ in range(250):  # 0.5 s: without cube-floor contact it would fall 1.2 m
        mujoco.mj_step(model, data)
    assert abs(data.body(models.SO101_CUBE).xpos[2] - CUBE_HALF_SIZE) < 2e-3
    # Put the cube between the open jaws: both contact sensors report it.
    data.qpos[:] = model.qpos0
    data.qpos[5] = 0.46  # gripper: pads 40 mm apart, the cube's width
    mujoco.mj_forward(model, data)
    tips = [data.site(s).xpos.copy() for s in models.SO101_JAW_TIPS]
    data.qpos[6:9] = 0.5 * (tips[0] + tips[1])
    mujoco.mju_mat2Quat(data.qpos[9:13], data.site(models.SO101_JAW_TIPS[0]).xmat)
    mujoco.mj_forward(model, data)
    touch = [data.sensor(s).data[0] for s in models.SO101_JAW_SENSORS]
    assert all(t > 0 for t in touch), touch


def test_shapes_ranges_and_registration():
    env = _task()
    obs = env.get_observations()
    assert obs["policy"].shape == (4, 33)
    assert env.action_space.shape == (6,)
    c = env.cfg
    assert ((env.cube_pos[:, 0] >= c.cube_x[0]) & (env.cube_pos[:, 0] <= c.cube_x[1])).all()
    assert torch.allclose(env.cube_pos[:, 2], torch.full((4,), CUBE_HALF_SIZE))
    obs, rew, dones, extras = env.step(torch.zeros(4, 6))
    assert rew.shape == (4,) and dones.shape == (4,) and extras["success"].dtype == torch.bool
    assert torch.isfinite(obs["policy"]).all()
    spec = get_task("so101-lift")
    assert spec.env_cfg().sim == "mujoco" and "ppo" in recipes_of("so101-lift")


def test_auto_reset_time_outs_and_term_logging():
    env = _task(episode_length=5)
    for t in range(5):
        obs, _, dones, extras = env.step(torch.zeros(4, 6))
        if t < 4:
            assert not dones.any() and extras["log"] == {}
    assert dones.all() and extras["time_outs"].all()
    assert set(extras["log"]) == TERMS
    assert (env.episode_length_buf == 0).all()
    assert torch.allclose(env.cube_pos[:, 2], torch.full((4,), CUBE_HALF_SIZE))  # fresh cubes, on the floor


def test_success_fires_when_the_cube_is_above_the_threshold():
    env = _task()
    lifted_z = CUBE_HALF_SIZE + env.cfg.lift_height + 0.02  # falls ~2 mm during one 20 ms step
    env.backend.qpos[0, env._cube_qpos + 2] = lifted_z
    env.backend.forward()
    _, rew, dones, extras = env.step(torch.zeros(4, 6))
    assert extras["success"].tolist() == [True, False, False, False]
    assert not dones.any()
    c = env.cfg
    assert rew[0] - rew[1:].max() > 0.9 * c.success_weight  # success alone: the lift term pays a held cube only


def test_pushing_the_cube_away_terminates():
    env = _task()
    env.backend.qpos[1, env._cube_qpos] += env.cfg.max_cube_travel + 0.05
    env.backend.forward()
    _, _, dones, extras = env.step(torch.zeros(4, 6))
    assert dones.tolist() == [False, True, False, False] and not extras["time_outs"].any()


def test_seeded_determinism():
    actions = torch.rand(12, 4, 6, generator=torch.Generator().manual_seed(3)) * 2 - 1

    def rollout(seed: int) -> list[np.ndarray]:
        env = _task(seed=seed, episode_length=6)
        out = [env.get_observations()["policy"].clone()]
        for a in actions:
            obs, rew, _, _ = env.step(a)
            out += [obs["policy"].clone(), rew.clone()]
        return out

    first, second, other = rollout(1), rollout(1), rollout(2)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], other[0])


def test_bad_backend_name_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown physics backend"):
        _task(sim="mujocoo")


def test_grasp_pays_only_for_a_cube_held_between_the_pads():
    env = _task()
    # Env 0: cube between the open pads, then the gripper closes on it and holds it in the air.
    q = env.backend.qpos.clone()
    c = env._cube_qpos
    q[0, c : c + 3] = env.grasp_point[0].double()
    q[0, c + 3 : c + 7] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    env.backend.set_joint_state(torch.tensor([0]), q[:1], ctrl=q[:1, env._qpos_ids].clone())
    env._refresh()
    close = torch.zeros(4, 6)
    close[:, 5] = -1.0
    for _ in range(10):
        env.step(close)
    assert env.grasped().tolist() == [True, False, False, False]
    assert env.lift()[0] > 0.1  # held well above the floor
    lift = env._reward_terms(close)["lift"]
    assert lift[0] == pytest.approx(env.cfg.lift_weight) and not lift[1:].any()  # held and high: the full term
    # Contact with both jaws is not enough: the cube must sit between the pads, and the gripper must be closing.
    env.touch[:] = 1.0
    assert env.grasped().tolist() == [True, False, False, False]
    env.last_action[0, 5] = 1.0
    assert not env.grasped().any()
    env.last_action[0, 5] = -1.0
    # The open term pays for an open gripper far from the cube only.
    open_far = torch.zeros(4, 6)
    open_far[:, 5] = 1.0
    env.step(open_far)
    w = env.cfg.open_weight
    assert env._reward_terms(open_far)["open"].tolist() == [0.0, w, w, w]


def test_bad_grasp_radius_is_a_clear_error():
    with pytest.raises(ValueError, match="grasp_radius"):
        _task(grasp_radius=0.0)


def test_resume_keeps_the_touch_flags_of_a_held_cube():
    """The jaws' contact sensors count contacts, a position-stage reading that ``forward()`` recomputes after a load
    (unlike acceleration-stage touch sensors): a resumed or restarted grasp sees the same flags."""
    env = _task()
    q = env.backend.qpos.clone()
    c = env._cube_qpos
    q[0, c : c + 3] = env.grasp_point[0].double()
    q[0, c + 3 : c + 7] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    env.backend.set_joint_state(torch.tensor([0]), q[:1], ctrl=q[:1, env._qpos_ids].clone())
    env._refresh()
    close = torch.zeros(4, 6)
    close[:, 5] = -1.0
    for _ in range(10):
        env.step(close)
    assert env.touch[0].tolist() == [1.0, 1.0]
    other = _task()
    other.load_state_dict(env.state_dict())
    assert torch.equal(other.touch, env.touch) and other.grasped().tolist() == env.grasped().tolist()
    other.start_episode_from(1, env.env_state(0))
    assert other.touch[1].tolist() == [1.0, 1.0]
