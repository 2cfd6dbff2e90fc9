"""VLASH future-state offsets: ``(o_t, s_{t+delta}, a_{t+delta:})`` samples that never leave their episode."""

import pytest
import torch

from rslkit.data.chunking import ChunkDataset
from rslkit.data.demonstrations import Demonstrations


def _demos(lengths=(6, 2, 5)) -> Demonstrations:
    """Observation ``[i, 100 + i]`` and action ``1000 + i`` at frame ``i``: samples show which rows they read."""
    n = sum(lengths)
    ends = torch.tensor(lengths).cumsum(0)
    i = torch.arange(n, dtype=torch.float32)
    return Demonstrations(
        observations=torch.stack((i, 100 + i), dim=1),
        actions=(1000 + i).unsqueeze(1),
        episode_index=torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)),
        episode_from=ends - torch.tensor(lengths),
        episode_to=ends,
    )


def test_offset_example_picks_shifted_state_and_chunk():
    data = ChunkDataset(_demos(), horizon=3, max_offset=4, state_slice=slice(1, 2))
    batch = data.get_offset(torch.tensor([1, 8]), torch.tensor([2, 3]))
    assert batch.obs[:, 0].tolist() == [1.0, 8.0]  # the observation stays at t
    assert batch.future_state[:, 0].tolist() == [103.0, 111.0]  # s_{t+delta}
    assert batch.actions[..., 0].tolist() == [[1003, 1004, 1005], [1011, 1012, 1012]]  # a_{t+delta:}, edge padded
    assert batch.is_pad.tolist() == [[False, False, False], [False, False, True]]


def test_action_source_uses_the_last_commanded_target():
    demos = _demos()
    demos.observations = demos.observations[:, :1]  # state slice as wide as the action
    data = ChunkDataset(demos, horizon=2, max_offset=3, state_slice=slice(0, 1), future_state_source="action")
    batch = data.get_offset(torch.tensor([1, 1]), torch.tensor([0, 2]))
    assert batch.future_state[:, 0].tolist() == [1.0, 1002.0]  # delta 0: observed; delta 2: a_{t+1}


def test_sampled_offsets_cover_0_to_d_and_never_cross_episode_ends():
    demos = _demos()
    data = ChunkDataset(demos, horizon=3, max_offset=4, state_slice=slice(0, 1))
    batch = data.sample_offset(4000, torch.Generator().manual_seed(0))
    t = batch.obs[:, 0].long()
    shifted = batch.future_state[:, 0].long()
    assert torch.equal(shifted, t + batch.offsets)
    assert set(batch.offsets.tolist()) == set(range(5))
    episode = demos.episode_index
    assert bool((episode[shifted] == episode[t]).all())
    chunk_rows = batch.actions[..., 0].long() - 1000
    assert bool((episode[chunk_rows] == episode[t].unsqueeze(1)).all())
    assert torch.equal(chunk_rows[:, 0], shifted)
    last = batch.offsets[t == 11]  # second to last frame of the last episode: delta in {0, 1}
    assert set(last.tolist()) == {0, 1}


def test_offsets_that_leave_the_episode_or_lack_a_state_are_refused():
    data = ChunkDataset(_demos(), horizon=2, max_offset=3, state_slice=slice(0, 1))
    with pytest.raises(ValueError, match="inside the frame's episode"):
        data.get_offset(torch.tensor([5]), torch.tensor([1]))  # frame 5 ends episode 0
    with pytest.raises(ValueError, match="state_slice"):
        ChunkDataset(_demos(), horizon=2, max_offset=3)
    with pytest.raises(ValueError, match="as wide as the action"):
        ChunkDataset(_demos(), 2, max_offset=3, state_slice=slice(0, 2), future_state_source="action")
