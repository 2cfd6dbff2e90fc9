"""so101-pick-place: observation groups, goal sampling and instructions, success only for a released cube resting at
the instructed goal, per-goal extras, reward terms, and clear errors for bad configs."""

from __future__ import annotations

import pytest
import torch

from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir

try:
    so101_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)

from rslkit.envs.registry import get_task  # noqa: E402
from rslkit.envs.tasks.so101_lift import CUBE_HALF_SIZE  # noqa: E402
from rslkit.envs.tasks.so101_pick_place import GOAL_POSITIONS, SO101PickPlaceCfg, SO101PickPlaceTask  # noqa: E402
from rslkit.utils.validation import ConfigError  # noqa: E402

TERMS = {"reach", "grasp", "open", "lift", "success", "action_rate", "joint_vel", "carry", "place"}


def _task(**kw) -> SO101PickPlaceTask:
    kw.setdefault("num_envs", 4)
    kw.setdefault("sim_threads", 1)
    return SO101PickPlaceTask(SO101PickPlaceCfg(**kw))


def _put_cube(env: SO101PickPlaceTask, xyz: torch.Tensor) -> None:
    """Cube of every env at ``xyz [N, 3]``, upright, at rest."""
    q = env.backend.qpos.clone()
    c = env._cube_qpos
    q[:, c : c + 3] = xyz.double()
    q[:, c + 3 : c + 7] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    env.backend.set_joint_state(torch.arange(env.num_envs), q, ctrl=env.backend.ctrl.to(q).clone())
    env._refresh()


def _gripper(env: SO101PickPlaceTask, open_: bool) -> torch.Tensor:
    """Actions holding the arm at home with the gripper open or closed."""
    a = torch.zeros(env.num_envs, 6)
    a[:, 5] = 1.0 if open_ else -1.0
    return a


def test_groups_layout_and_registration():
    env = _task()
    obs = env.get_observations()
    assert obs["policy"].shape == (4, 36) and obs["policy"].dtype == torch.float32
    assert obs["goal"].shape == (4, 1) and obs["goal"].dtype == torch.int64
    assert obs["proprio"].shape == (4, 12)
    torch.testing.assert_close(obs["policy"][:, 33:36], env.goal())
    assert torch.equal(obs["goal"][:, 0], env.goal_index)
    torch.testing.assert_close(obs["proprio"], torch.cat((obs["policy"][:, 0:6], obs["policy"][:, 27:33]), -1))
    torch.testing.assert_close(obs["joint_pos"], obs["policy"][:, 0:6])
    for group, names in env.observation_names.items():
        assert len(names) == obs[group].shape[-1], group
    for i, g in enumerate(env.goal_index.tolist()):
        x, y = GOAL_POSITIONS[env.cfg.goals[g]]
        assert env.goal()[i].tolist() == pytest.approx([x, y, CUBE_HALF_SIZE])
    spec = get_task("so101-pick-place")
    assert spec.env_cfg().num_envs == 512 and spec.env_cfg().goals == tuple(GOAL_POSITIONS)


def test_goals_cover_all_and_instructions_name_them():
    env = _task(num_envs=64)
    assert sorted(env.goal_index.unique().tolist()) == [0, 1, 2, 3]
    assert env.instructions == [f"put the cube in the {g} corner" for g in env.cfg.goals]
    texts = env.instruction()
    assert texts == [env.instructions[g] for g in env.goal_index.tolist()]
    assert env.instruction([3, 0]) == [texts[3], texts[0]]
    before = env.goal_index.clone()
    env.reset_envs(torch.arange(64))
    assert not torch.equal(env.goal_index, before)  # fresh goals per episode
    obs = env.set_goals(torch.tensor([2, 1]), env_ids=[5, 6])
    assert env.goal_index[5:7].tolist() == [2, 1] and obs["goal"][5:7, 0].tolist() == [2, 1]
    with pytest.raises(ValueError, match=r"Goal indices must be in \[0, 4\)"):
        env.set_goals(4)
    assert env.env_state(5)["goal_index"].item() == 2  # start states carry the goal


def test_success_needs_the_released_cube_resting_at_its_goal():
    env = _task(num_envs=4)
    env.set_goals(torch.tensor([0, 1, 2, 3]))
    goals, r = env.goal(), env.cfg.goal_radius
    wrong = env.goal_positions[torch.tensor([1, 0, 3, 2])]
    # env 0: at its goal; 1: at another goal; 2: just beyond goal_radius; 3: at its goal, 3 cm up (falling).
    cubes = torch.stack(
        (goals[0], wrong[1], goals[2] + torch.tensor([r + 0.01, 0.0, 0.0]), goals[3] + torch.tensor([0.0, 0.0, 0.03]))
    )
    _put_cube(env, cubes)
    _, rew, dones, extras = env.step(_gripper(env, open_=True))
    assert extras["success"].tolist() == [True, False, False, False]
    assert extras["goal"].tolist() == [0, 1, 2, 3] and not dones.any()
    assert rew[0] - rew[1:].max() > 0.9 * env.cfg.success_weight
    # Commanded closed, the cube is not released.
    _put_cube(env, goals)
    _, _, _, extras = env.step(_gripper(env, open_=False))
    assert not extras["success"].any()
    _, _, _, extras = env.step(_gripper(env, open_=True))
    assert extras["success"].all()


def test_terminate_on_success_and_goal_extras_before_the_reset():
    env = _task(num_envs=2, terminate_on_success=True)
    env.set_goals(torch.tensor([3, 2]))
    _put_cube(env, torch.stack((env.goal()[0], env.goal()[0])))  # env 1 is at env 0's goal, not its own
    _, _, dones, extras = env.step(_gripper(env, open_=True))
    assert dones.tolist() == [True, False] and not extras["time_outs"].any()
    assert extras["success"].tolist() == [True, False] and extras["goal"].tolist() == [3, 2]
    assert env.cube_pos[0, 0] < 0.29 and abs(float(env.cube_pos[0, 1])) <= 0.05  # env 0 restarted


def test_time_outs_log_every_term():
    env = _task(episode_length=3)
    for _ in range(3):
        _, _, dones, extras = env.step(torch.zeros(4, 6))
    assert dones.all() and extras["time_outs"].all()
    assert set(extras["log"]) == {f"Episode_Reward/{t}" for t in TERMS}


def test_place_term_pays_a_low_cube_at_the_goal_only():
    env = _task(num_envs=2)
    env.set_goals(torch.tensor([0, 0]))
    _put_cube(env, torch.stack((env.goal()[0], env.goal_positions[3])))
    terms = env._reward_terms(_gripper(env, open_=True))
    assert terms["place"].tolist() == pytest.approx([env.cfg.place_weight, 0.0], abs=0.01)
    assert not terms["carry"].any()  # nothing is held


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("goals", ("back left", "middle"), r"--env\.goals: has unknown names \['middle'\]; choose from"),
        ("goals", (), r"--env\.goals: must name at least one"),
        ("goals", ("back left", "back left"), r"--env\.goals: names a goal twice"),
        ("goal_radius", 0.0, r"--env\.goal_radius: must be > 0"),
        ("goal_radius", float("nan"), r"--env\.goal_radius: must be > 0"),
        ("instruction_template", "put the cube there", r"must contain '\{goal\}'"),
    ],
)
def test_bad_config_is_a_clear_error(field, value, match):
    with pytest.raises(ConfigError, match=match):
        _task(**{field: value})


def test_a_subset_of_goals():
    env = _task(num_envs=8, goals=("front right", "back left"))
    assert env.instructions == ["put the cube in the front right corner", "put the cube in the back left corner"]
    torch.testing.assert_close(env.goal_positions[:, :2], torch.tensor([[0.28, -0.12], [0.16, 0.12]]))
    assert set(env.goal_index.tolist()) <= {0, 1}
