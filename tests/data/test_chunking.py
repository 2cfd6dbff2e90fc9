"""Action chunking at episode boundaries and min-max normalization."""

import pytest
import torch

from rslkit.data import ChunkDataset, Demonstrations, MinMaxNormalizer, chunk_indices


def _demos(lengths=(5, 2, 4)):
    n = sum(lengths)
    ends = torch.tensor(lengths).cumsum(0)
    episode = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    # Action i is the frame index i itself, so chunks show which rows they read.
    return Demonstrations(
        observations=torch.arange(n, dtype=torch.float32).unsqueeze(1),
        actions=torch.arange(n, dtype=torch.float32).unsqueeze(1),
        episode_index=episode,
        episode_from=ends - torch.tensor(lengths),
        episode_to=ends,
    )


def test_chunks_never_cross_episode_ends():
    demos = _demos()
    idx = chunk_indices(demos.episode_from, demos.episode_to, horizon=3)
    assert idx[0].tolist() == [0, 1, 2]
    assert idx[3].tolist() == [3, 4, 4]  # padded with the episode's last action
    assert idx[4].tolist() == [4, 4, 4]
    assert idx[5].tolist() == [5, 6, 6]  # episode of length 2
    assert idx[10].tolist() == [10, 10, 10]
    episode = demos.episode_index
    assert bool((episode[idx] == episode.unsqueeze(1)).all())


def test_chunk_dataset_examples_and_pad_mask():
    data = ChunkDataset(_demos(), horizon=4)
    obs, actions, is_pad = data.get(torch.tensor([2, 6]))
    assert obs.squeeze(-1).tolist() == [2.0, 6.0]
    assert actions.squeeze(-1).tolist() == [[2, 3, 4, 4], [6, 6, 6, 6]]
    assert is_pad.tolist() == [[False, False, False, True], [False, True, True, True]]
    obs, actions, _ = data.sample(64, torch.Generator().manual_seed(0))
    assert obs.shape == (64, 1) and actions.shape == (64, 4, 1)
    assert bool((actions[:, 0] == obs).all())


def test_chunk_dataset_refuses_gaps():
    demos = _demos()
    demos.episode_from = demos.episode_from + 1
    with pytest.raises(ValueError, match="back to back"):
        ChunkDataset(demos, 2)
    with pytest.raises(ValueError, match="horizon"):
        chunk_indices(torch.tensor([0]), torch.tensor([3]), 0)


def test_min_max_round_trip():
    x = torch.randn(200, 3) * torch.tensor([1.0, 10.0, 0.1]) + 4
    x[:, 2] = 7.0  # a constant dimension
    norm = MinMaxNormalizer(3)
    norm.set_stats(x.min(0).values, x.max(0).values)
    y = norm(x)
    assert y[:, :2].min() == pytest.approx(-1.0) and y[:, :2].max() == pytest.approx(1.0)
    assert bool((y[:, 2] == 0).all())  # constant dims are centred, not divided by ~0
    torch.testing.assert_close(norm.unnormalize(y), x)
    restored = MinMaxNormalizer(3)
    restored.load_state_dict(norm.state_dict())
    torch.testing.assert_close(restored(x), y)


def test_min_max_rejects_bad_stats():
    norm = MinMaxNormalizer(2)
    with pytest.raises(ValueError, match="3/3 dims, the model expects 2"):
        norm.set_stats(torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="min <= max"):
        norm.set_stats(torch.ones(2), torch.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        norm.set_stats(torch.tensor([0.0, float("nan")]), torch.ones(2))
