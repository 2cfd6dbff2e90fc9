"""LeRobotDataset v3.0 demonstrations as replay transitions: shifts, episode ends, reward and action errors, runner."""

from __future__ import annotations

import pytest
import torch

from rslkit.data import Episode, read_lerobot_dataset, write_lerobot_dataset
from rslkit.data.transitions import demonstrations_to_transitions, load_demonstrations
from rslkit.envs.registry import make_env
from rslkit.recipes.sac_defaults import small_task_sac_cfg
from rslkit.runners.off_policy_runner import OffPolicyRunner
from rslkit.storage.replay_buffer import ReplayBuffer, ReplayCfg
from rslkit.utils.seeding import seed_everything

LENGTHS = (4, 3)


def _episodes(rewards: bool = True, dones: bool = True, scale: float = 1.0, obs_dim: int = 3) -> list[Episode]:
    out, start = [], 0
    for n in LENGTHS:
        t = torch.arange(start, start + n, dtype=torch.float32)
        done = torch.zeros(n, dtype=torch.bool)
        done[-1] = True
        out.append(
            Episode(
                observations=t[:, None].repeat(1, obs_dim),  # frame index in every entry
                actions=scale * torch.linspace(-1, 1, n)[:, None],
                rewards=-t if rewards else None,
                dones=done if dones else None,
            )
        )
        start += n
    return out


def _dataset(tmp_path, **kw):
    return write_lerobot_dataset(tmp_path / "ds", _episodes(**kw), fps=10)


def test_frames_become_transitions_with_terminal_episode_ends(tmp_path):
    demos = read_lerobot_dataset(_dataset(tmp_path))
    td = demonstrations_to_transitions(demos)
    assert td.batch_size == torch.Size([7])
    assert td["obs", "policy"][:, 0].tolist() == [0, 1, 2, 3, 4, 5, 6]
    # next obs is the next frame of the same episode; the last frame's is a placeholder (its own)
    assert td["next_obs", "policy"][:, 0].tolist() == [1, 2, 3, 3, 5, 6, 6]
    assert td["reward"].tolist() == [0, -1, -2, -3, -4, -5, -6]
    assert td["terminated"].tolist() == [False, False, False, True, False, False, True]
    assert not bool(td["truncated"].any()) and bool(td["next_valid"].all())
    torch.testing.assert_close(td["action"], demos.actions)


def test_time_limited_or_done_less_episodes_end_truncated_without_next_obs(tmp_path):
    for td in (
        demonstrations_to_transitions(read_lerobot_dataset(_dataset(tmp_path)), done_is_terminal=False),
        demonstrations_to_transitions(
            read_lerobot_dataset(write_lerobot_dataset(tmp_path / "nd", _episodes(dones=False), 10))
        ),
    ):
        ends = [False, False, False, True, False, False, True]
        assert td["truncated"].tolist() == ends and not bool(td["terminated"].any())
        assert td["next_valid"].tolist() == [not e for e in ends]


def test_missing_rewards_raise_and_can_be_supplied(tmp_path):
    demos = read_lerobot_dataset(_dataset(tmp_path, rewards=False))
    assert demos.rewards is None
    with pytest.raises(ValueError, match=r"next\.reward.*rewards=r"):
        demonstrations_to_transitions(demos)
    td = demonstrations_to_transitions(demos, rewards=torch.ones(7))
    assert td["reward"].tolist() == [1.0] * 7
    with pytest.raises(ValueError, match=r"shape \[7\]"):
        demonstrations_to_transitions(demos, rewards=torch.ones(6))


def test_actions_outside_unit_range_need_bounds(tmp_path):
    demos = read_lerobot_dataset(_dataset(tmp_path, scale=2.0))  # actions in [-2, 2]
    with pytest.raises(ValueError, match="action_bounds"):
        demonstrations_to_transitions(demos)
    td = demonstrations_to_transitions(demos, action_bounds=(torch.tensor([-2.0]), torch.tensor([2.0])))
    torch.testing.assert_close(td["action"], demos.actions / 2.0)
    with pytest.raises(ValueError, match="action_bounds"):
        demonstrations_to_transitions(demos, action_bounds=(torch.tensor([-1.0]), torch.tensor([1.0])))


def test_load_demonstrations_reads_a_lerobot_dir_into_the_replay_buffer(tmp_path):
    root = _dataset(tmp_path)
    td = load_demonstrations(root, obs_group="policy")
    obs = td["obs"][:1]
    buf = ReplayBuffer(obs, 1, ReplayCfg(capacity=100, demo_fraction=1.0), "cpu")
    buf.add_demonstrations(td)
    assert buf.num_demos == 7 and buf.num_interventions() == (0, 0)
    got = {}
    batch = buf.sample(400, 3, 0.5)
    for i in range(400):
        got[int(batch["obs", "policy"][i, 0])] = (float(batch["reward"][i]), float(batch["discount"][i]))
    assert got[1] == pytest.approx((-1 + 0.5 * -2 + 0.25 * -3, 0.0))  # cut at the episode's terminal frame
    assert got[4] == pytest.approx((-4 + 0.5 * -5 + 0.25 * -6, 0.0))


def test_load_demonstrations_refuses_pickles_and_other_folders_and_says_how_to_record(tmp_path):
    pt = tmp_path / "demos.pt"
    pt.write_bytes(b"never unpickled")
    with pytest.raises(ValueError, match="pickled file, not a LeRobotDataset v3.0.*python -m rslkit.record --task T"):
        load_demonstrations(pt)
    (tmp_path / "memmap").mkdir()
    with pytest.raises(ValueError, match="a folder without meta/info.json"):
        load_demonstrations(tmp_path / "memmap")
    with pytest.raises(FileNotFoundError, match="set --agent.demo_path to a LeRobotDataset") as err:
        load_demonstrations(tmp_path / "missing")
    assert "agent.demo_path" in str(err.value) and " agent.demo_path" not in str(err.value)


def test_sac_runner_trains_with_a_lerobot_demo_path(tmp_path):
    root = write_lerobot_dataset(tmp_path / "ds", _episodes(obs_dim=3), fps=10)  # pendulum: 3 obs, 1 action
    cfg = small_task_sac_cfg()
    cfg.demo_path, cfg.demo_done_is_terminal, cfg.logger = str(root), False, ()
    cfg.algorithm.batch_size = 32
    cfg.policy.actor_hidden_dims = cfg.policy.critic_hidden_dims = (16,)
    cfg.replay.capacity = 1000
    cfg.num_steps_per_env, cfg.random_steps, cfg.learning_starts = 2, 1, 1
    seed_everything(0)
    runner = OffPolicyRunner(make_env("pendulum", num_envs=4), cfg, None, "cpu")
    runner.learn(1)
    assert runner.buffer is not None and runner.buffer.num_demos == 7 and runner.alg.num_updates > 0
    assert runner.buffer.demos is not None and int(runner.buffer.demos.data["truncated"].sum()) == 2
