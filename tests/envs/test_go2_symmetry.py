"""The Go2's left-right mirror: an involution of observations and actions that maps the observation of a mirrored
physical state (MuJoCo qpos / qvel reflected through the trunk's x-z plane) to the mirrored observation."""

from __future__ import annotations

import math

import pytest
import torch

from rslkit.envs.mujoco.go2 import go2_model_dir
from rslkit.envs.mujoco.models import ModelNotFoundError

try:
    go2_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"Go2 model missing ({err})", allow_module_level=True)

from rslkit.envs.mirror import ColumnMirror  # noqa: E402
from rslkit.envs.tasks import go2_rewards as rw  # noqa: E402
from rslkit.envs.tasks.go2_flat import HOME, Go2FlatCfg, Go2FlatTask  # noqa: E402
from rslkit.envs.tasks.go2_symmetry import LEG_PARTNER, go2_mirror, go2_rule  # noqa: E402

LEG_ORDER = ("FL", "FR", "RL", "RR")
JOINT_PERM = [3 * LEG_ORDER.index(LEG_PARTNER[leg]) + k for leg in LEG_ORDER for k in range(3)]
JOINT_SIGN = torch.tensor([-1.0, 1.0, 1.0] * 4)


def _task(policy_lin_vel: bool = True) -> Go2FlatTask:
    return Go2FlatTask(Go2FlatCfg(num_envs=2, sim_threads=1, noise_level=0.0, policy_lin_vel=policy_lin_vel))


def _mirror_joints(x: torch.Tensor) -> torch.Tensor:
    return x[..., JOINT_PERM] * JOINT_SIGN.to(x)


def _mirror_state(qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The physical mirror image: world y -> -y, the trunk's rotation R -> M R M, legs swapped, hips negated."""
    q, v = qpos.clone(), qvel.clone()
    q[1] = -q[1]
    q[4], q[6] = -q[4], -q[6]  # quaternion (w, x, y, z) -> (w, -x, y, -z)
    q[7:] = _mirror_joints(qpos[7:])
    v[1] = -v[1]  # world linear velocity
    v[3], v[5] = -v[3], -v[5]  # body angular velocity is axial: (-wx, wy, -wz)
    v[6:] = _mirror_joints(qvel[6:])
    return q, v


@pytest.mark.parametrize("policy_lin_vel", [True, False])
def test_mirror_is_an_involution_of_every_group_and_the_actions(policy_lin_vel: bool) -> None:
    env = _task(policy_lin_vel)
    mirror = go2_mirror(env)
    assert set(mirror.groups) == {"policy", "critic"}
    g = torch.Generator().manual_seed(0)
    obs = env.get_observations().apply(lambda x: torch.randn(x.shape, generator=g))
    twice = mirror.observations(mirror.observations(obs))
    for group in ("policy", "critic"):
        assert torch.equal(twice[group], obs[group])
        assert not torch.equal(mirror.observations(obs)[group], obs[group])
    actions = torch.randn(5, 12, generator=g)
    assert torch.equal(mirror.actions(mirror.actions(actions)), actions)
    torch.testing.assert_close(mirror.actions(actions), _mirror_joints(actions), atol=0, rtol=0)


def test_mirrored_state_gives_the_mirrored_observation() -> None:
    env = _task()
    g = torch.Generator().manual_seed(1)
    qpos = torch.zeros(19, dtype=torch.float64)
    qpos[:3] = torch.tensor([0.3, 0.2, 0.31])
    tilt = rw.yaw_quat(torch.tensor([0.7]))[0].double()  # a yawed and rolled/pitched trunk
    roll_pitch = torch.tensor([math.cos(0.1), math.sin(0.1) * 0.6, math.sin(0.1) * 0.8, 0.0], dtype=torch.float64)
    w1, x1, y1, z1 = tilt
    w2, x2, y2, z2 = roll_pitch
    qpos[3:7] = torch.stack((w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                             w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2))  # fmt: skip
    qpos[7:] = torch.tensor(HOME, dtype=torch.float64) + 0.3 * torch.randn(12, generator=g, dtype=torch.float64)
    qvel = torch.randn(18, generator=g, dtype=torch.float64)
    mq, mv = _mirror_state(qpos, qvel)
    env.backend.set_joint_state(torch.arange(2), torch.stack((qpos, mq)), torch.stack((qvel, mv)))
    env.commands[:] = torch.tensor([[0.6, 0.3, -0.8], [0.6, -0.3, 0.8]])
    action = torch.randn(12, generator=g)
    env.last_action[:] = torch.stack((action, _mirror_joints(action)))
    env.friction[:], env.added_mass[:] = 0.8, 1.0  # drawn per env at reset; the mirror keeps them
    env._refresh()

    # The geometry agrees: every body of the mirrored state sits at the reflection of its partner.
    xpos = env.backend.xpos()
    names = [env.model.body(i).name for i in range(env.model.nbody)]
    for i, name in enumerate(names):
        partner = names.index(LEG_PARTNER[name[:2]] + name[2:] if name[:2] in LEG_PARTNER else name)
        torch.testing.assert_close(xpos[1, partner], xpos[0, i] * torch.tensor([1.0, -1.0, 1.0]).to(xpos))

    obs = env.get_observations()
    mirrored = go2_mirror(env).observations(obs[:1])
    for group in ("policy", "critic"):
        torch.testing.assert_close(mirrored[group][0], obs[group][1], atol=1e-5, rtol=1e-5, msg=group)


def test_height_samples_and_unknown_columns() -> None:
    assert go2_rule("height.x+0.30_y-0.10") == ("height.x+0.30_y+0.10", 1.0)
    assert go2_rule("height.x-0.20_y+0.00") == ("height.x-0.20_y+0.00", 1.0)
    assert go2_rule("foot_force.FL.y") == ("foot_force.FR.y", -1.0)
    assert go2_rule("base_torque.y") == ("base_torque.y", 1.0)
    names = {"policy": ["lin_vel_x2.x", "mystery"]}
    with pytest.raises(ValueError, match="'mystery'.*data_augmentation_func"):
        ColumnMirror(names, ["FL_hip_joint.position_offset", "FR_hip_joint.position_offset"], go2_rule)
    with pytest.raises(ValueError, match="not one of its columns"):
        ColumnMirror({"policy": ["foot_contact.FL"]}, [], go2_rule)
