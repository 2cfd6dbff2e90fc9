"""Replay buffer: circular writes, hand-computed n-step targets, demonstrations, sizing errors, memmap, state."""

from __future__ import annotations

import io

import pytest
import torch
from tensordict import TensorDict

from rslkit.storage.replay_buffer import ReplayBuffer, ReplayCfg, transition_bytes


def _obs(values: torch.Tensor) -> TensorDict:
    """Observation group ``policy`` ``[N, 2]`` whose first entry encodes ``values`` (e.g. the time index)."""
    x = torch.stack((values.float(), torch.zeros_like(values, dtype=torch.float32)), -1)
    return TensorDict({"policy": x}, batch_size=[values.shape[0]])


def _buffer(num_envs: int = 1, capacity: int = 100, **kw) -> ReplayBuffer:
    return ReplayBuffer(_obs(torch.zeros(num_envs)), 1, ReplayCfg(capacity=capacity, **kw), "cpu")


def _add(buf: ReplayBuffer, t: int, reward: float, term=False, trunc=False, valid=True, next_value=None) -> None:
    n = buf.num_envs
    nxt = torch.full((n,), float(t + 1 if next_value is None else next_value))
    buf.add(
        _obs(torch.full((n,), float(t))),
        torch.zeros(n, 1),
        torch.full((n,), reward),
        _obs(nxt),
        torch.full((n,), term),
        torch.full((n,), trunc),
        torch.full((n,), valid),
    )


def _by_start(batch: TensorDict) -> dict[int, tuple[float, float, float, float]]:
    """``start time -> (return, discount, next obs value, weight)`` over a batch."""
    out = {}
    for i in range(batch.batch_size[0]):
        key = int(batch["obs", "policy"][i, 0])
        out[key] = (
            float(batch["reward"][i]),
            float(batch["discount"][i]),
            float(batch["next_obs", "policy"][i, 0]),
            float(batch["weight"][i]),
        )
    return out


def test_circular_overwrite_keeps_newest_rows():
    buf = _buffer(num_envs=2, capacity=6)  # 3 time rows of 2 envs
    for t in range(5):
        _add(buf, t, float(t))
    assert len(buf) == 6 and buf.capacity == 6
    starts = set(_by_start(buf.sample(200, 1, 0.9)))
    assert starts == {2, 3, 4}


def test_n_step_targets_terminal_vs_truncated_hand_computed():
    # rewards 1..6; step 2 terminates; step 4 is truncated with its final observation (value 40) reported.
    g = 0.5
    buf = _buffer()
    _add(buf, 0, 1.0)
    _add(buf, 1, 2.0)
    _add(buf, 2, 3.0, term=True, next_value=20)
    _add(buf, 3, 4.0)
    _add(buf, 4, 5.0, trunc=True, next_value=40)
    _add(buf, 5, 6.0)
    got = _by_start(buf.sample(400, 3, g))
    expected = {
        0: (1 + g * 2 + g**2 * 3, 0.0, 20.0, 1.0),  # cut at the termination: no bootstrap
        1: (2 + g * 3, 0.0, 20.0, 1.0),
        2: (3.0, 0.0, 20.0, 1.0),
        3: (4 + g * 5, g**2, 40.0, 1.0),  # cut at the time-out: bootstrap from the final observation
        4: (5.0, g, 40.0, 1.0),
        5: (6.0, g, 6.0, 1.0),  # newest row: nothing stored after it, 1-step
    }
    assert set(got) == set(expected)
    for t, want in expected.items():
        assert got[t] == pytest.approx(want), t


def test_time_out_without_final_obs_is_masked_and_predecessors_bootstrap_earlier():
    g = 0.5
    buf = _buffer()
    _add(buf, 0, 1.0)
    _add(buf, 1, 2.0)
    _add(buf, 2, 3.0, trunc=True, valid=False, next_value=99)  # env gave the reset obs, not the final one
    _add(buf, 3, 4.0)
    got = _by_start(buf.sample(400, 3, g))
    assert got[0] == pytest.approx((1 + g * 2, g**2, 2.0, 1.0))  # stops before the unknown step, bootstraps s_2
    assert got[1] == pytest.approx((2.0, g, 2.0, 1.0))
    assert got[2][3] == 0.0  # no valid next observation: weight 0
    assert got[3] == pytest.approx((4.0, g, 4.0, 1.0))


def _demos(m: int, value: float = 1000.0, obs_dim: int = 2, act_dim: int = 1) -> TensorDict:
    obs = TensorDict({"policy": torch.full((m, obs_dim), value)}, batch_size=[m])
    return TensorDict(
        {
            "obs": obs,
            "action": torch.zeros(m, act_dim),
            "reward": torch.ones(m),
            "next_obs": obs.clone(),
            "terminated": torch.zeros(m, dtype=torch.bool),
            "truncated": torch.arange(m) % 10 == 9,
        },
        batch_size=[m],
    )


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_demo_fraction_of_every_batch(fraction):
    buf = _buffer(num_envs=4, capacity=400, demo_fraction=fraction)
    for t in range(20):
        _add(buf, t, 0.0)
    buf.add_demonstrations(_demos(30))
    batch = buf.sample(1000, 1, 0.99)
    from_demo = batch["obs", "policy"][:, 0] == 1000.0
    assert int(batch["is_demo"].sum()) == round(fraction * 1000)
    assert torch.equal(from_demo, batch["is_demo"])
    assert buf.num_demos == 30


def test_impossible_capacity_raises_with_memmap_hint():
    with pytest.raises(ValueError, match="memmap"):
        _buffer(capacity=10**14)


def test_capacity_below_two_steps_raises():
    with pytest.raises(ValueError, match="capacity"):
        _buffer(num_envs=8, capacity=8)


def test_mismatched_demonstrations_raise():
    buf = _buffer()
    with pytest.raises(ValueError, match="obs.*policy|policy"):
        buf.add_demonstrations(_demos(5, obs_dim=3))
    with pytest.raises(ValueError, match="action"):
        buf.add_demonstrations(_demos(5, act_dim=2))
    bad = _demos(5)
    bad["action"] = torch.full((5, 1), 3.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        buf.add_demonstrations(bad)
    missing = _demos(5).exclude("terminated")
    with pytest.raises(ValueError, match="terminated"):
        buf.add_demonstrations(missing)


def test_memmap_storage(tmp_path):
    buf = _buffer(num_envs=2, capacity=20, storage="memmap", memmap_dir=str(tmp_path / "rb"))
    assert buf.online.data.is_memmap()
    for t in range(4):
        _add(buf, t, float(t))
    got = _by_start(buf.sample(100, 2, 0.5))
    assert got[1] == pytest.approx((1 + 0.5 * 2, 0.25, 3.0, 1.0))
    assert any((tmp_path / "rb").iterdir())


def test_state_dict_round_trip():
    buf = _buffer(num_envs=2, capacity=10)
    for t in range(7):
        _add(buf, t, float(t))
    buf.add_demonstrations(_demos(4))
    other = _buffer(num_envs=2, capacity=10)
    other.load_state_dict(buf.state_dict())
    assert (other.online.ptr, other.online.size) == (buf.online.ptr, buf.online.size)
    assert (other.online.data == buf.online.data).all()
    assert other.num_demos == 4
    torch.manual_seed(0)
    a = buf.sample(64, 2, 0.9)
    torch.manual_seed(0)
    b = other.sample(64, 2, 0.9)
    assert (a == b).all()


def _saved_bytes(state: dict) -> int:
    f = io.BytesIO()
    torch.save(state, f)
    return len(f.getvalue())


def test_saved_state_holds_only_the_filled_rows():
    # 40 rows of 8 envs in a 1M-transition buffer (35 MB allocated): the checkpoint part must not hold all of it.
    buf = _buffer(num_envs=8, capacity=1_000_000)
    for t in range(40):
        _add(buf, t, float(t))
    state = buf.state_dict()
    leaves = TensorDict(state["online"]["data"], batch_size=[40, 8]).values(True, True)
    stored = sum(v.untyped_storage().nbytes() for v in leaves)
    assert stored == 40 * 8 * transition_bytes(buf.template)
    assert _saved_bytes(state) < 64 * 1024 < buf.nbytes() // 100
    other = _buffer(num_envs=8, capacity=1_000_000)
    other.load_state_dict(state)
    assert (other.online.ptr, other.online.size) == (40, 40)
    assert (other.online.data[:40] == buf.online.data[:40]).all()


def test_wrapped_buffer_round_trips_with_its_write_position():
    buf = _buffer(num_envs=2, capacity=10)  # 5 rows
    for t in range(13):  # wrapped twice: write row 3, oldest step 8
        _add(buf, t, float(t))
    buf.add_demonstrations(_demos(7))
    other = _buffer(num_envs=2, capacity=10)
    other.load_state_dict(buf.state_dict())
    assert (other.online.ptr, other.online.size) == (buf.online.ptr, buf.online.size) == (3, 5)
    assert (other.online.data == buf.online.data).all()
    assert other.demos is not None and buf.demos is not None and (other.demos.data == buf.demos.data).all()
    for b in (buf, other):  # the next writes overwrite the same oldest rows
        _add(b, 13, 13.0)
        _add(b, 14, 14.0)
    assert (other.online.data == buf.online.data).all()
    assert set(_by_start(other.sample(300, 1, 0.9))) >= {10, 11, 12, 13, 14, 1000}
    torch.manual_seed(1)
    a = buf.sample(64, 3, 0.9)
    torch.manual_seed(1)
    assert (a == other.sample(64, 3, 0.9)).all()


def test_transition_bytes_go2_sized():
    obs = TensorDict({"policy": torch.zeros(4, 48)}, batch_size=[4])
    buf = ReplayBuffer(obs, 12, ReplayCfg(capacity=400), "cpu")
    # obs + next_obs (2 x 48 float32), 12 float32 actions, reward, 4 bools (terminated, truncated, next_valid,
    # intervention)
    assert transition_bytes(buf.template) == 2 * 48 * 4 + 12 * 4 + 4 + 4
