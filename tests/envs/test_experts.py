"""Scripted experts (``TaskSpec.expert``): success rates with margin over a few episodes (so101-lift, so101-reach),
pendulum's return, the lookup by task, takeover from a perturbed state, and their demonstrations recorded by the one
recorder into a LeRobot dataset that the replay buffer accepts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rslkit.data import episode_stats, load_demonstrations, record_episodes, write_lerobot_dataset
from rslkit.envs.expert import as_expert_observation, expert_policy
from rslkit.envs.registry import expert_for, get_task
from rslkit.realworld.experts import scripted_human_for
from rslkit.realworld.sim_robot import StartStates

torch.set_num_threads(1)


def _so101_model() -> None:
    pytest.importorskip("mujoco")
    from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir

    try:
        so101_model_dir()
    except ModelNotFoundError as err:
        pytest.skip(f"SO-101 model missing ({err})")


def _env(task: str, num_envs: int, seed: int, **kw):
    spec = get_task(task)
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.seed = num_envs, seed
    if hasattr(cfg, "sim_threads"):
        cfg.sim_threads = 1
    for k, v in kw.items():
        setattr(cfg, k, v)
    return spec.make_env(cfg, "cpu"), cfg


def _stats(env, task: str, cfg, episodes: int) -> dict[str, float]:
    """Success rate and mean return of ``episodes`` whole episodes of ``task``'s expert."""
    return episode_stats(record_episodes(env, expert_policy(expert_for(task, cfg), env.device), episodes))


def test_expert_for_lists_the_tasks_that_have_one() -> None:
    with pytest.raises(ValueError, match=r"cartpole.*\['pendulum', 'so101-lift', 'so101-pick-place', 'so101-reach'\]"):
        expert_for("cartpole")


def test_so101_lift_expert_succeeds() -> None:
    _so101_model()
    env, cfg = _env("so101-lift", 10, seed=7)  # measured 100 % over 200 episodes; ask for 8 of 10
    stats = _stats(env, "so101-lift", cfg, episodes=10)
    assert stats["success_rate"] >= 0.8, stats


def test_so101_lift_expert_takes_over_from_a_perturbed_state() -> None:
    _so101_model()
    env, cfg = _env("so101-lift", 10, seed=3)
    expert, rng = expert_for("so101-lift", cfg), np.random.default_rng(3)
    for _ in range(25):  # a bad policy: smooth random actions push the arm (and maybe the cube) around
        env.step(torch.from_numpy(rng.uniform(-0.6, 0.6, (10, 6)).astype(np.float32)))
    for _ in range(100 - 25 - 1):  # the scripted human takes over for the rest of the episode
        env.step(torch.from_numpy(expert(as_expert_observation(env.get_observations()))))
    assert float(env._success().float().mean()) >= 0.7  # measured 100 % over 100 envs


def test_so101_reach_expert_succeeds_and_refuses_delta_mode() -> None:
    _so101_model()
    env, cfg = _env("so101-reach", 10, seed=5)  # measured 100 % over 200 episodes
    stats = _stats(env, "so101-reach", cfg, episodes=10)
    assert stats["success_rate"] >= 0.8, stats
    _, delta_cfg = _env("so101-reach", 1, seed=0)
    delta_cfg.action_mode = "delta"
    with pytest.raises(ValueError, match="absolute"):
        expert_for("so101-reach", delta_cfg)


def test_pendulum_expert_swings_up() -> None:
    env, cfg = _env("pendulum", 10, seed=1)
    stats = _stats(env, "pendulum", cfg, episodes=10)
    assert stats["mean_return"] > -300 and np.isnan(stats["success_rate"]), stats  # measured about -160
    one = expert_for("pendulum")({"policy": np.array([-1.0, 0.0, 0.5], np.float32)})
    assert one.shape == (1,)  # one env, no batch dimension


def test_demonstrations_fit_the_replay_buffer_and_fill_start_states(tmp_path) -> None:
    from rslkit.storage.replay_buffer import ReplayBuffer, ReplayCfg

    env, cfg = _env("pendulum", 4, seed=2, episode_length=20)
    pool = StartStates(probability=1.0)
    g = torch.Generator().manual_seed(0)
    policy = expert_policy(expert_for("pendulum", cfg), env.device)
    episodes = record_episodes(env, policy, 6, action_noise=0.1, generator=g, keep_states=True)
    for episode in episodes:
        pool.add_episode(episode.states)
    assert len(pool) == 6 * 19  # the states of kept episodes, but their last
    root = write_lerobot_dataset(tmp_path / "demos", episodes, fps=20, robot_type="pendulum")
    demos = load_demonstrations(root, done_is_terminal=False)  # pendulum's episodes end by time only
    assert demos.batch_size == torch.Size([120])
    assert int(demos["truncated"].sum()) == 6 and bool(demos["truncated"][19::20].all())
    # within an episode, next_obs is the next step's obs
    torch.testing.assert_close(demos["next_obs", "policy"][:19], demos["obs", "policy"][1:20])
    assert float(demos["action"].abs().max()) <= 1.0
    buffer = ReplayBuffer(env.get_observations(), env.num_actions, ReplayCfg(capacity=1000), "cpu")
    buffer.add_demonstrations(demos)
    assert buffer.num_demos == 120


def test_successful_only_and_scripted_human_for_a_task() -> None:
    _so101_model()
    env, cfg = _env("so101-reach", 4, seed=9)
    policy = expert_policy(expert_for("so101-reach", cfg), env.device)
    episodes = record_episodes(env, policy, 2, successful_only=True)
    assert all(ep.succeeded for ep in episodes) and [len(ep) for ep in episodes] == [cfg.episode_length] * 2
    human = scripted_human_for("so101-reach", cfg, stall_steps=3, max_takeover_steps=5)
    human.reset()
    obs = {k: v[0] for k, v in as_expert_observation(env.get_observations()).items()}
    policy_action = np.zeros(5, np.float32)
    outputs = [human(obs, policy_action) for _ in range(10)]  # the same state over and over: a stall
    assert outputs[0] is None and any(o is not None for o in outputs)
    assert human.episode_stats()["interventions"] >= 1
