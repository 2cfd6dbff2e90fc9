"""VLAC's sample kinds: labels against hand-computed values."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.rewards.pairs import PairSampler, PairSamplerCfg, ProgressData


def _data(success=(True, True)) -> ProgressData:
    frames = TensorDict({"policy": torch.arange(21.0).unsqueeze(-1)}, [21])  # episodes [0, 11) and [11, 21)
    return ProgressData(frames, torch.tensor([0, 11]), torch.tensor([11, 21]), ["a", "b"], torch.tensor(success))


def test_labels_of_each_kind():
    data = _data()
    cfg = PairSamplerCfg(stagnant=0.25, mismatched=0.25, done=0.25, done_frames=3)
    batch = PairSampler(data, cfg, seed=3).sample(400)
    episode = (batch.index_a >= 11).long()
    assert torch.equal(episode, (batch.index_b >= 11).long()), "both frames of a pair come from one episode"
    length = torch.tensor([10.0, 9.0])[episode]  # L - 1
    own_goal = [data.goals[int(e)] for e in episode]
    matched = torch.tensor([g == o for g, o in zip(batch.goals, own_goal)])
    expected = (batch.index_b - batch.index_a).float() / length
    assert torch.allclose(batch.delta[matched], expected[matched])
    assert (batch.delta[~matched] == 0).all() and (batch.done[~matched] == 0).all()
    assert 80 <= int((~matched).sum()) <= 120, "a quarter of the batch has a mismatched goal"
    ends = torch.tensor([11, 21])[episode]
    assert torch.equal(batch.done[matched].bool(), (batch.index_b >= ends - 3)[matched])
    assert int((batch.index_a == batch.index_b).sum()) >= 100, "stagnant pairs"
    assert (batch.delta < 0).any() and (batch.delta > 0).any(), "both orders occur"
    assert (batch.delta_mask == 1).all()


def test_failed_episodes_are_masked_and_never_done():
    data = _data(success=(True, False))
    batch = PairSampler(data, PairSamplerCfg(mismatched=0.0), seed=0).sample(100)
    failed = batch.index_b >= 11
    assert int(failed.sum()) == 10
    assert (batch.delta_mask[failed] == 0).all() and (batch.done[failed] == 0).all()
    assert (batch.delta_mask[~failed] == 1).all()


def test_sampler_errors_say_what_to_do():
    with pytest.raises(ValueError, match="successful episodes"):
        PairSampler(_data(success=(False, False)), PairSamplerCfg())
    one_goal = _data()
    one_goal.goals = ["a", "a"]
    with pytest.raises(ValueError, match="--distractor_goal 'open the drawer'") as err:
        PairSampler(one_goal, PairSamplerCfg())
    assert "--distractor_goals" not in str(err.value), "the flag of python -m rslkit.rewards train"
    PairSampler(one_goal, PairSamplerCfg(distractor_goals=("open the drawer",)))
    with pytest.raises(ValueError, match="sum to"):
        PairSamplerCfg(stagnant=0.5, mismatched=0.5, done=0.5)
    with pytest.raises(ValueError, match=">= 2 frames"):
        ProgressData(
            TensorDict({"x": torch.zeros(3, 1)}, [3]), torch.tensor([0]), torch.tensor([1]), ["a"], torch.tensor([True])
        )


def test_subset_renumbers_episodes():
    sub = _data().subset([1])
    assert sub.goals == ["b"] and sub.starts.tolist() == [0] and sub.ends.tolist() == [10]
    assert sub.frames["policy"][0, 0] == 11.0
