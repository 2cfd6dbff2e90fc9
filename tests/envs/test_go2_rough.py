"""go2-rough: observation groups and names, spawning on the envs' tiles, the curriculum inside the task, determinism
whatever the thread count, exact resume, registration, a train.py smoke run, the Warp backend and the Go2 mirror."""

from __future__ import annotations

import os

import pytest
import torch

from rslkit.envs.mujoco.go2 import go2_model_dir
from rslkit.envs.mujoco.models import ModelNotFoundError

try:
    go2_model_dir()
except ModelNotFoundError as err:
    pytest.skip(f"Go2 model missing ({err})", allow_module_level=True)

from rslkit.envs.registry import get_task  # noqa: E402
from rslkit.envs.tasks.go2_rough import Go2RoughCfg, Go2RoughTask  # noqa: E402
from rslkit.envs.terrain.curriculum import CurriculumCfg  # noqa: E402
from rslkit.envs.terrain.generator import TerrainCfg  # noqa: E402
from rslkit.recipes import agent_cfg  # noqa: E402

SMALL_TERRAIN = {"tile_size": 4.0, "num_rows": 4, "border": 3.0, "platform": 1.0}


def _task(device: str = "cpu", **kw) -> Go2RoughTask:
    kw.setdefault("num_envs", 6)
    kw.setdefault("sim_threads", 1)
    kw.setdefault("terrain", TerrainCfg(**SMALL_TERRAIN))
    kw.setdefault("spawn_jitter", 0.3)
    return Go2RoughTask(Go2RoughCfg(**kw), device=device)


def _actions(n: int, steps: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.5 * torch.randn(steps, n, 12, generator=g)


def test_groups_names_and_privileged_columns() -> None:
    env = _task(noise_level=0.0)
    obs = env.get_observations()
    names = env.observation_names
    assert set(obs.keys()) == {"policy", "teacher", "critic"}
    for group, values in obs.items():
        assert values.shape == (6, len(names[group])), group
    assert obs["policy"].shape == (6, 48) and obs["teacher"].shape == (6, 48 + 187 + 6)
    assert names["teacher"][:48] == names["policy"] and names["teacher"][48] == "height_x5.x-0.80_y-0.50"
    teacher = obs["teacher"]
    torch.testing.assert_close(teacher[:, :48], obs["policy"])
    torch.testing.assert_close(teacher[:, names["teacher"].index("friction")], env.friction)
    # Height samples read the ground under the scan points: standing on its tile at spawn, the one under the trunk
    # (the scan's centre) is 5 (base height over the ground - 0.3).
    centre = names["teacher"].index("height_x5.x+0.00_y+0.00")
    torch.testing.assert_close(teacher[:, centre], 5.0 * (env.base_height - 0.3), atol=1e-5, rtol=0)
    for _ in range(25):
        obs, *_ = env.step(torch.zeros(6, 12))
    forces = obs["critic"][:, -4:] / 0.01
    assert bool((forces.sum(-1) > 100.0).all())  # the robot's weight (~150 N) rests on its feet


def test_envs_spawn_on_their_level_and_column() -> None:
    env = _task(num_envs=12, curriculum=CurriculumCfg(max_init_level=3))
    assert set(env.curriculum.levels.tolist()) == {0, 1, 2, 3}
    origins = torch.as_tensor(env.terrain.tile_origins)[env.curriculum.levels, env.curriculum.columns]
    assert bool(((env.base_xy - origins[:, :2]).abs() <= 0.3 + 1e-5).all())
    # Never into the ground; at most the spawn area's highest bump (rough tiles: 2 x 0.08 m) above 0.3 m.
    assert bool((env.base_height >= 0.3 - 1e-5).all() & (env.base_height <= 0.3 + 0.16 + 1e-5).all())


def test_curriculum_moves_levels_at_episode_end() -> None:
    env = _task(num_envs=3, episode_length=5, curriculum=CurriculumCfg(max_init_level=1), push_interval_s=0.0)
    env.curriculum.levels[:] = torch.tensor([1, 1, 1])
    env.commands[:] = torch.tensor([[1.0, 0.0, 0.0]] * 3)
    for _ in range(4):
        env.step(torch.zeros(3, 12))
    # Env 0 is carried 2.5 m (> half the 4 m tile): promoted. Env 1 stays: demoted (0 of 0.1 m commanded,
    # less than half). Env 2 walked 0.06 m of 0.1 m commanded: stays.
    qpos = env.backend.qpos
    qpos[0, :2] = env.spawn_xy[0].double() + torch.tensor([2.5, 0.0], dtype=torch.float64)
    qpos[1, :2] = env.spawn_xy[1].double()
    qpos[2, :2] = env.spawn_xy[2].double() + torch.tensor([0.06, 0.0], dtype=torch.float64)
    _, _, dones, extras = env.step(torch.zeros(3, 12))
    assert bool(dones.all()) and env.curriculum.levels.tolist() == [2, 0, 1]
    assert float(extras["log"]["Curriculum/terrain_level"]) == pytest.approx(1.0)
    assert bool((env.commanded_distance == 0).all())


def _rollout(sim_threads: int, seed: int = 3) -> list[torch.Tensor]:
    env = _task(num_envs=8, seed=seed, episode_length=12, sim_threads=sim_threads)
    out = []
    for a in 3.0 * _actions(8, 30, seed=1):  # large enough that some envs fall and reset on their own steps
        obs, rew, dones, _ = env.step(a)
        out += [obs["teacher"], obs["critic"], rew, dones.float(), env.curriculum.levels.float()]
    return out


def test_same_seed_same_run_whatever_sim_threads() -> None:
    single = _rollout(1)
    assert 0 < torch.stack(single[3::5]).sum()  # resets happened
    for threads in (2, 4):
        for step, (x, y) in enumerate(zip(_rollout(threads), single, strict=True)):
            assert torch.equal(x, y), f"sim_threads={threads}, item {step}"
    other = _rollout(1, seed=4)
    assert not torch.equal(other[0], single[0])


def test_state_dict_resumes_exactly() -> None:
    env = _task(num_envs=4, episode_length=8)
    actions = _actions(4, 14, seed=2)
    for a in actions[:4]:
        env.step(a)
    saved = env.state_dict()
    first = [(env.step(a)[1].clone(), env.curriculum.levels.clone()) for a in actions[4:]]
    other = _task(num_envs=4, episode_length=8, seed=9)  # the terrain has its own seed (--env.terrain.seed)
    for a in 2.0 * actions[:3]:
        other.step(a)  # other states, levels and generator, all overwritten by the load
    other.load_state_dict(saved)
    second = [(other.step(a)[1].clone(), other.curriculum.levels.clone()) for a in actions[4:]]
    for (r1, l1), (r2, l2) in zip(first, second, strict=True):
        assert torch.equal(r1, r2) and torch.equal(l1, l2)


def test_registered_with_a_teacher_recipe() -> None:
    cfg = get_task("go2-rough").env_cfg()
    assert isinstance(cfg, Go2RoughCfg) and cfg.terrain.num_rows == 10
    agent = agent_cfg("go2-rough", "ppo")
    assert agent.policy.actor_obs_groups == ("teacher",) and agent.policy.critic_obs_groups == ("critic",)


def test_train_smoke(tmp_path) -> None:
    from rslkit.cli import train

    args = ["--task", "go2-rough", "--num_envs", "4", "--max_iterations", "2", "--logdir", str(tmp_path)]
    small = ["--agent.num_steps_per_env", "8", "--agent.policy.actor_hidden_dims", "16,16",
             "--agent.policy.critic_hidden_dims", "16,16", "--env.terrain.num_rows", "3",
             "--env.terrain.tile_size", "4", "--env.terrain.platform", "1", "--env.spawn_jitter", "0.3",
             "--agent.logger="]  # fmt: skip
    runner = train.main([*args, *small])
    assert runner.iteration == 2 and any(tmp_path.rglob("model_*.pt"))


@pytest.mark.slow  # MuJoCo Warp on CPU: ~30 s with its kernels cached (minutes the first time)
def test_warp_runs_the_same_task_code() -> None:
    """The same task on --sim warp: reset observations (spawn, height scan, privileged terms) equal the C backend's;
    the first steps stay close. Not bit-close: on a heightfield C MuJoCo makes one contact per prism a foot sphere
    touches (2-3 per foot), MuJoCo Warp its own set, so contact impulses differ from the first touchdown."""
    pytest.importorskip("mujoco_warp")
    device = os.environ.get("RSLKIT_WARP_TEST_DEVICE", "cpu")
    envs = {
        "mujoco": _task(num_envs=4, noise_level=0.0),
        "warp": _task(device, num_envs=4, sim="warp", noise_level=0.0),
    }
    first = {s: env.get_observations() for s, env in envs.items()}
    for group in first["mujoco"].keys():
        torch.testing.assert_close(first["warp"][group].cpu(), first["mujoco"][group], atol=1e-4, rtol=0)
    for a in _actions(4, 3, seed=0):
        (_, rew_c, *_), (_, rew_w, *_) = (env.step(a.to(env.device)) for env in envs.values())
        torch.testing.assert_close(rew_w.cpu(), rew_c, atol=5e-3, rtol=0)
        torch.testing.assert_close(envs["warp"].base_z.cpu(), envs["mujoco"].base_z, atol=2e-3, rtol=0)
    for _ in range(20):
        envs["warp"].step(torch.zeros(4, 12, device=envs["warp"].device))
    assert bool((envs["warp"].base_height > 0.12).all())  # standing on the heightfield, not fallen through it


def test_left_right_mirror_knows_every_column() -> None:
    """PPO's ``go2`` symmetry reads go2-rough's column names: height samples swap with the sample at ``-dy``."""
    from rslkit.envs.tasks.go2_symmetry import go2_mirror

    env = _task(num_envs=2, noise_level=0.0)
    mirror = go2_mirror(env)  # raises for a column its rule does not know
    obs = env.get_observations()
    mirrored = mirror.observations(obs)
    names = env.observation_names["teacher"]
    left, right = names.index("height_x5.x+0.30_y+0.20"), names.index("height_x5.x+0.30_y-0.20")
    torch.testing.assert_close(mirrored["teacher"][:, left], obs["teacher"][:, right])
    torch.testing.assert_close(mirror.observations(mirrored)["critic"], obs["critic"])
